package images

import (
	"testing"
	"time"
)

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
