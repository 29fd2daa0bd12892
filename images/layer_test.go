package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteTreeTarIgnoresTimes: two copies of a tree that differ only in
// their files' modification and access times give the same bytes, with
// every entry stamped with the given time, in sorted order, and hard links
// written as links.
func TestWriteTreeTarIgnoresTimes(t *testing.T) {
	mk := func(mtime time.Time) string {
		root := t.TempDir()
		for _, f := range []struct{ path, data string }{
			{"usr/sbin/b", "bb"}, {"usr/sbin/a", "a"}, {"etc/x.conf", "x=1\n"},
		} {
			p := filepath.Join(root, f.path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f.data), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Link(filepath.Join(root, "usr/sbin/a"), filepath.Join(root, "usr/sbin/c")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("a", filepath.Join(root, "usr/sbin/d")); err != nil {
			t.Fatal(err)
		}
		return root
	}
	epoch := time.Unix(1_700_000_000, 0)
	var outs [][]byte
	for _, m := range []time.Time{time.Unix(1, 0), time.Now()} {
		var buf bytes.Buffer
		if err := WriteTreeTar(&buf, mk(m), epoch); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, buf.Bytes())
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("the same tree with other file times gave a different tar")
	}
	tr := tar.NewReader(bytes.NewReader(outs[0]))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %s, want %s", h.Name, h.ModTime, epoch)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: user or group name %q/%q, want none", h.Name, h.Uname, h.Gname)
		}
		if h.Name == "usr/sbin/c" && (h.Typeflag != tar.TypeLink || h.Linkname != "usr/sbin/a") {
			t.Errorf("usr/sbin/c: type %c link %q, want a hard link to usr/sbin/a", h.Typeflag, h.Linkname)
		}
		if h.Name == "usr/sbin/d" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "a") {
			t.Errorf("usr/sbin/d: type %c link %q, want a symlink to a", h.Typeflag, h.Linkname)
		}
	}
	want := []string{"etc/", "etc/x.conf", "usr/", "usr/sbin/", "usr/sbin/a", "usr/sbin/b", "usr/sbin/c", "usr/sbin/d"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
}

// TestFilesLayerDigest: the same files give the same layer digest whatever
// order they are listed in; another mtime or mode gives another digest.
func TestFilesLayerDigest(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0)
	a := File{Path: "usr/local/bin/x", Data: []byte("binary"), Mode: 0o755}
	b := File{Path: "/etc/x.conf", Data: []byte("conf"), Mode: 0o644}
	digest := func(files []File, mtime time.Time) string {
		l, err := FilesLayer(files, mtime)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	base := digest([]File{a, b}, epoch)
	if got := digest([]File{b, a}, epoch); got != base {
		t.Errorf("files in another order: %s, want %s", got, base)
	}
	if got := digest([]File{a, b}, epoch.Add(time.Second)); got == base {
		t.Error("another mtime gave the same digest")
	}
	a.Mode = 0o700
	if got := digest([]File{a, b}, epoch); got == base {
		t.Error("another mode gave the same digest")
	}
}
