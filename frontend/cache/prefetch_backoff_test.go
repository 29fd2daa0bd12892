package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestPrefetchFailedBacksOff: after PrefetchFailed, Get asks for no
// prefetch of the entry until RecheckInterval has passed, and serves it
// stale once it has expired (RFC 8767 §5); an entry stored while the
// prefetch ran is not affected by its failure.
func TestPrefetchFailedBacksOff(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	b := req(t, "p.example.", dns.TypeA, nil)
	q := parse(t, b)
	set := func(ttl string) {
		t.Helper()
		if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "p.example. "+ttl+" IN A 192.0.2.1"), nil)); err != nil {
			t.Fatal(err)
		}
	}
	get := func() Result { _, r := c.Get(buf(), q, 512); return r }

	set("1000")
	get()
	clk.Advance(901 * time.Second)
	if r := get(); !r.Prefetch {
		t.Fatalf("no prefetch near expiry: %+v", r)
	}
	c.PrefetchFailed(q.Key())
	for i := range 100 {
		if r := get(); !r.Hit || r.Prefetch {
			t.Fatalf("hit %d after a failed prefetch: %+v, want a hit without prefetch", i, r)
		}
	}
	clk.Advance(RecheckInterval)
	if r := get(); !r.Prefetch {
		t.Fatalf("no prefetch once the recheck interval has passed: %+v", r)
	}

	// An entry that expires within the interval is served stale.
	set("100")
	get()
	clk.Advance(95 * time.Second)
	if r := get(); !r.Prefetch {
		t.Fatalf("no prefetch near expiry: %+v", r)
	}
	c.PrefetchFailed(q.Key())
	clk.Advance(10 * time.Second) // expired 5 s ago, 20 s of the interval left
	if r := get(); !r.Hit || !r.Stale || r.Prefetch {
		t.Fatalf("expired within the recheck interval: %+v, want a stale hit", r)
	}
	clk.Advance(RecheckInterval)
	if r := get(); r.Hit {
		t.Fatalf("past the recheck interval: %+v, want a miss", r)
	}

	// A refresh stored by a miss while the prefetch ran wins over the
	// prefetch's late failure.
	set("100")
	get()
	clk.Advance(91 * time.Second)
	if r := get(); !r.Prefetch {
		t.Fatalf("no prefetch near expiry: %+v", r)
	}
	set("100")
	c.PrefetchFailed(q.Key())
	get()
	clk.Advance(91 * time.Second)
	if r := get(); !r.Prefetch {
		t.Fatalf("the new entry inherited the old one's failed prefetch: %+v", r)
	}
}
