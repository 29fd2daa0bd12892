package conformance

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodedns/nodedns/images/debian"
)

// TestDNSToolsLock checks that the committed lock parses, pins amd64 (or
// arch-independent) pool paths, and holds every package DNSToolsPackages
// names. With NODEDNS_CONFORMANCE_UPDATE_LOCK=1 it rewrites the lock from
// the mirror's current index first.
func TestDNSToolsLock(t *testing.T) {
	if os.Getenv("NODEDNS_CONFORMANCE_UPDATE_LOCK") == "1" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b, err := UpdateDNSToolsLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Base(DNSToolsLockPath), b, 0o644); err != nil {
			t.Fatal(err)
		}
		dnsToolsLock = b
	}
	pkgs, err := debian.ParseLock(bytes.NewReader(dnsToolsLock))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, p := range pkgs {
		if p.Architecture != "amd64" && p.Architecture != "all" {
			t.Errorf("%s is locked for %s", p.Name, p.Architecture)
		}
		have[p.Name] = true
	}
	for _, want := range DNSToolsPackages {
		if !have[want] {
			t.Errorf("%s: %s missing", DNSToolsLockPath, want)
		}
	}
}
