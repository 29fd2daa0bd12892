package images

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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

// TestFileCapabilityBindsPort53 runs a binary as the backend does in its
// pod: uid and gid 65532, NET_BIND_SERVICE the only capability in the
// bounding set and, as the runtime leaves it, in the permitted set, and
// no_new_privs (allowPrivilegeEscalation: false). Unpacked from a layer
// written by FilesLayer (GNU tar applies the SCHILY.xattr record, as
// containerd does), with FileCapabilities it binds port 53 in a throwaway
// network namespace; the same binary without them cannot; and with them but
// without NET_BIND_SERVICE in the bounding set, execve refuses it.
func TestFileCapabilityBindsPort53(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot change user or set security.capability")
	}
	for _, tool := range []string{"capsh", "unshare", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian's libcap2-bin, util-linux, tar)", tool)
		}
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil { // uid 65532 must reach the binary
			t.Fatal(err)
		}
	}
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := GoBuildInArch(context.Background(), filepath.Join(root, "images"), "./testdata/bind53", filepath.Join(dir, "build"), "-s -w", runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := FileCapabilities(CapNetBindService)
	if err != nil {
		t.Fatal(err)
	}
	l, err := FilesLayer([]File{
		{Path: "with-cap", Data: bin, Mode: 0o755, Xattrs: map[string][]byte{XattrCapability: caps}},
		{Path: "without-cap", Data: bin, Mode: 0o755},
	}, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	untar := exec.Command("tar", "--xattrs", "--xattrs-include=security.capability", "-x", "-C", dir)
	untar.Stdin = rc
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		t.Fatal(err)
	}
	var others, all []string
	for c := 0; c <= n; c++ {
		all = append(all, strconv.Itoa(c))
		if c != CapNetBindService {
			others = append(others, strconv.Itoa(c))
		}
	}
	run := func(name string, drop []string) (string, error) {
		// The bounding set first (that needs CAP_SETPCAP, gone after the
		// uid change), then keep the permitted set across setuid, as
		// runc does for a non-root container user.
		keep := "--caps=cap_net_bind_service+p"
		if len(drop) == len(all) {
			keep = "--caps="
		}
		cmd := exec.Command("unshare", "--net", "capsh",
			"--drop="+strings.Join(drop, ","), "--inh=",
			"--keep=1", "--gid=65532", "--uid=65532", keep,
			"--no-new-privs", "--shell="+filepath.Join(dir, name), "--")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("with-cap", others); err != nil || out != "bound" {
		t.Errorf("with cap_net_bind_service=+ep: %v: %s", err, out)
	}
	if out, err := run("without-cap", others); err == nil || !strings.Contains(out, "permission denied") {
		t.Errorf("without file capabilities: %v: %s; want bind refused", err, out)
	}
	// The effective bit makes the binary "capability-dumb" to the kernel:
	// when the bounding set lacks a capability the file forces, execve
	// fails (EPERM) rather than run it without. A pod that drops ALL and
	// does not add NET_BIND_SERVICE cannot start the backend.
	if out, err := run("with-cap", all); err == nil || !strings.Contains(out, "execve") {
		t.Errorf("with cap_net_bind_service=+ep and an empty bounding set: %v: %s; want execve refused", err, out)
	}
}
