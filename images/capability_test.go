package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFileCapabilities: the vfs_cap_data bytes of linux/capability.h,
// revision 2: the magic word 0x02000001 (revision 2, effective), then the
// permitted and inheritable masks of capabilities 0-31 and 32-63.
func TestFileCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps []int
		want []byte
	}{
		{"net_bind_service", []int{CapNetBindService}, []byte{
			0x01, 0x00, 0x00, 0x02, // magic: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
			0x00, 0x04, 0x00, 0x00, // permitted 0-31: bit 10
			0x00, 0x00, 0x00, 0x00, // inheritable 0-31
			0x00, 0x00, 0x00, 0x00, // permitted 32-63
			0x00, 0x00, 0x00, 0x00, // inheritable 32-63
		}},
		{"net_admin+bpf", []int{12, 39}, []byte{
			0x01, 0x00, 0x00, 0x02,
			0x00, 0x10, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00,
			0x80, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FileCapabilities(tc.caps...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("FileCapabilities(%v) = % x, want % x", tc.caps, got, tc.want)
			}
		})
	}
	if _, err := FileCapabilities(64); err == nil {
		t.Error("capability 64: no error")
	}
}

// TestFileCapabilitiesAsSetcap: the bytes are those `setcap
// cap_net_bind_service=+ep` writes (root: it sets security.capability).
func TestFileCapabilitiesAsSetcap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: setcap cannot set security.capability")
	}
	if _, err := exec.LookPath("setcap"); err != nil {
		t.Skip("setcap not installed (Debian's libcap2-bin)")
	}
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("setcap", "cap_net_bind_service=+ep", p).CombinedOutput(); err != nil {
		t.Fatalf("setcap: %v: %s", err, out)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, XattrCapability, buf)
	if err != nil {
		t.Fatalf("getxattr %s: %v", XattrCapability, err)
	}
	want, err := FileCapabilities(CapNetBindService)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("setcap wrote % x, FileCapabilities gives % x", buf[:n], want)
	}
}

// TestFilesLayerXattrs: a File's Xattrs become SCHILY.xattr PAX records of
// its entry, and only of its entry.
func TestFilesLayerXattrs(t *testing.T) {
	caps, err := FileCapabilities(CapNetBindService)
	if err != nil {
		t.Fatal(err)
	}
	l, err := FilesLayer([]File{
		{Path: "usr/local/bin/x", Data: []byte("bin"), Mode: 0o755, Xattrs: map[string][]byte{XattrCapability: caps}},
		{Path: "etc/x.conf", Data: []byte("conf"), Mode: 0o644},
	}, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		v, ok := h.PAXRecords["SCHILY.xattr."+XattrCapability]
		switch {
		case h.Name == "usr/local/bin/x":
			found = true
			if !ok || v != string(caps) {
				t.Errorf("%s: capability record % x (present %v), want % x", h.Name, v, ok, caps)
			}
		case ok:
			t.Errorf("%s: capability record on an entry that has none", h.Name)
		}
	}
	if !found {
		t.Fatal("usr/local/bin/x not in the layer")
	}
}
