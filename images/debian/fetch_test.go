package debian

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFetcherDeb: a .deb is checked against its pin, cached, and served
// from the cache the next time; a file of another digest is refused and not
// cached.
func TestFetcherDeb(t *testing.T) {
	body := []byte("a .deb's bytes")
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/debian/pool/main/a/a/a_1_amd64.deb" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	f := Fetcher{Mirror: srv.URL + "/debian/", CacheDir: t.TempDir()}
	ctx := context.Background()
	pin := Locked{Name: "a", Size: int64(len(body)), SHA256: sha256Sum(body), Filename: "pool/main/a/a/a_1_amd64.deb"}

	bad := pin
	bad.SHA256 = strings.Repeat("0", 64)
	if _, err := f.Deb(ctx, bad); err == nil || !strings.Contains(err.Error(), "the lock says "+bad.SHA256) {
		t.Fatalf("wrong digest: error %v", err)
	}
	for i := 0; i < 2; i++ {
		got, err := f.Deb(ctx, pin)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(body) {
			t.Fatalf("got %q", got)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("%d downloads, want 2 (the refused one, then one cached)", n)
	}
	missing := pin
	missing.Filename = "pool/main/b/b/b_1_amd64.deb"
	if _, err := f.Deb(ctx, missing); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing file: error %v", err)
	}
}

// TestReleaseSum finds a file's line in a Release file's SHA256 section
// only, not in MD5Sum's.
func TestReleaseSum(t *testing.T) {
	rel := []byte("Codename: bookworm\nMD5Sum:\n 0123 10 main/binary-amd64/Packages.xz\nSHA256:\n abcd 8689464 main/binary-amd64/Packages.xz\n ef01 9 main/binary-arm64/Packages.xz\n")
	sum, size, err := releaseSum(rel, "main/binary-amd64/Packages.xz")
	if err != nil || sum != "abcd" || size != 8689464 {
		t.Errorf("releaseSum = %q %d %v", sum, size, err)
	}
	if _, _, err := releaseSum(rel, "main/binary-riscv64/Packages.xz"); err == nil {
		t.Error("missing file: no error")
	}
}
