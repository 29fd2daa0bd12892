package debian

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRootFS unpacks two made-up packages: files under /bin and /lib land
// in /usr with top-level symlinks, moved relative symlinks still reach
// their targets, hard links come after their file, documentation but the
// copyright is dropped, devices are left out, a directory or an identical
// file shipped twice is fine, and each package's stanza is recorded as
// installed. GNU tar unpacks the result and the links resolve.
func TestRootFS(t *testing.T) {
	a := makeDeb(t, "pkg-a", []tarEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "./bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "./bin/x", typ: tar.TypeReg, data: "x-binary", mode: 0o755},
		{name: "./lib/", typ: tar.TypeDir, mode: 0o755},
		{name: "./lib/tri/", typ: tar.TypeDir, mode: 0o755},
		{name: "./lib/tri/libz.so.1.2", typ: tar.TypeReg, data: "lib"},
		{name: "./lib/tri/libz.so.1", typ: tar.TypeSymlink, linkname: "libz.so.1.2"},
		{name: "./lib/tri/up", typ: tar.TypeSymlink, linkname: "../../usr/share/a/data"},
		{name: "./lib64/", typ: tar.TypeDir, mode: 0o755},
		{name: "./lib64/ld.so", typ: tar.TypeSymlink, linkname: "/lib/tri/libz.so.1.2"},
		{name: "./usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/a/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/a/data", typ: tar.TypeReg, data: "shared"},
		{name: "./usr/share/a/zz", typ: tar.TypeReg, data: "linked"},
		{name: "./usr/share/a/aa", typ: tar.TypeLink, linkname: "./usr/share/a/zz"},
		{name: "./usr/share/doc/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/doc/pkg-a/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/doc/pkg-a/copyright", typ: tar.TypeReg, data: "GPL"},
		{name: "./usr/share/doc/pkg-a/changelog.gz", typ: tar.TypeReg, data: "log"},
		{name: "./usr/share/man/man8/x.8.gz", typ: tar.TypeReg, data: "man"},
		{name: "./usr/lib/x86_64-linux-gnu/gconv/UTF-7.so", typ: tar.TypeReg, data: "iconv"},
		{name: "./usr/lib/x86_64-linux-gnu/libkeep.so", typ: tar.TypeReg, data: "keep"},
		{name: "./usr/lib/gconv/not-multiarch", typ: tar.TypeReg, data: "kept"},
		{name: "./dev/null", typ: tar.TypeChar},
	})
	b := makeDeb(t, "pkg-b", []tarEntry{
		{name: "./usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/a/data", typ: tar.TypeReg, data: "shared"},
		{name: "./sbin/y", typ: tar.TypeSymlink, linkname: "../bin/x"},
	})
	r := NewRootFS()
	for _, d := range [][]byte{a, b} {
		if err := r.AddDeb(d); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := r.WriteTar(&out, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(out.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		v := string(h.Typeflag) + " " + string(data) + h.Linkname
		got[strings.TrimSuffix(h.Name, "/")] = v
		order = append(order, h.Name)
		if h.Uname != "" || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: uname %q mtime %s", h.Name, h.Uname, h.ModTime)
		}
	}
	want := map[string]string{
		"bin":                              "2 usr/bin",
		"lib":                              "2 usr/lib",
		"lib64":                            "2 usr/lib64",
		"sbin":                             "2 usr/sbin",
		"usr/bin/x":                        "0 x-binary",
		"usr/lib/tri/libz.so.1":            "2 libz.so.1.2",
		"usr/lib/tri/up":                   "2 ../../share/a/data",
		"usr/lib64/ld.so":                  "2 /lib/tri/libz.so.1.2",
		"usr/sbin/y":                       "2 ../bin/x",
		"usr/share/a/aa":                   "0 linked",
		"usr/share/a/zz":                   "1 usr/share/a/aa",
		"usr/share/doc/pkg-a/copyright":    "0 GPL",
		"usr/share/doc/pkg-a/changelog.gz": "",
		"usr/share/man/man8/x.8.gz":        "",
		"usr/share/man":                    "",
		"dev/null":                         "",
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	if !strings.Contains(got[StatusDir+"/pkg-a"], "Package: pkg-a\nStatus: install ok installed\nVersion: 1.0-1\n") ||
		!strings.Contains(got[StatusDir+"/pkg-a"], "\n two lines\n") {
		t.Errorf("%s/pkg-a: %q", StatusDir, got[StatusDir+"/pkg-a"])
	}
	if got[StatusDir+"/pkg-b.md5sums"] == "" {
		t.Errorf("no %s/pkg-b.md5sums", StatusDir)
	}
	if strings.Join(r.Packages(), " ") != "pkg-a pkg-b" {
		t.Errorf("packages %v", r.Packages())
	}

	// A real unpacker creates every entry and the links resolve.
	dir := t.TempDir()
	p := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	os.Mkdir(root, 0o755)
	if o, err := exec.Command("tar", "-xf", p, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, o)
	}
	for link, content := range map[string]string{"sbin/y": "x-binary", "lib/tri/up": "shared", "lib64/ld.so": "", "usr/share/a/zz": "linked"} {
		b, err := os.ReadFile(filepath.Join(root, link))
		if link == "lib64/ld.so" {
			// An absolute target resolves in the image's root, not here.
			if tgt, _ := os.Readlink(filepath.Join(root, "usr/lib64/ld.so")); tgt != "/lib/tri/libz.so.1.2" {
				t.Errorf("usr/lib64/ld.so -> %q", tgt)
			}
			continue
		}
		if err != nil || string(b) != content {
			t.Errorf("%s: %q %v, want %q", link, b, err, content)
		}
	}
}

// TestRootFSConflict: two packages shipping one path with other content is
// an error naming both, as dpkg refuses it.
func TestRootFSConflict(t *testing.T) {
	r := NewRootFS()
	if err := r.AddDeb(makeDeb(t, "one", []tarEntry{{name: "./usr/bin/x", typ: tar.TypeReg, data: "1"}})); err != nil {
		t.Fatal(err)
	}
	err := r.AddDeb(makeDeb(t, "two", []tarEntry{{name: "./bin/x", typ: tar.TypeReg, data: "2"}, {name: "./usr/bin/x", typ: tar.TypeReg, data: "2"}}))
	if err == nil || !strings.Contains(err.Error(), "usr/bin/x: two ships it too, differently from one") {
		t.Errorf("error %v", err)
	}
}

// TestReadDebErrors: what is not a .deb is refused.
func TestReadDebErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"not ar", []byte("hello"), "not an ar archive"},
		{"no debian-binary", writeAr([]arMember{{Name: "x", Data: []byte("1")}, {Name: "y"}, {Name: "z"}}), "format 2.x"},
		{"unknown compression", writeAr([]arMember{{Name: "debian-binary", Data: []byte("2.0\n")}, {Name: "control.tar.lz"}, {Name: "data.tar"}}), "unknown compression"},
		{"no data", writeAr([]arMember{{Name: "debian-binary", Data: []byte("2.0\n")}, {Name: "a"}, {Name: "b"}}), "no control.tar or data.tar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readDeb(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}
