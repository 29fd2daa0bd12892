package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestPrefetchSignal(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	b := req(t, "p.example.", dns.TypeA, nil)
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "p.example. 100 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	get := func() Result { _, r := c.Get(buf(), q, 512); return r }
	if r := get(); r.Prefetch {
		t.Fatal("prefetch with 90% of the TTL left")
	}
	clk.Advance(91 * time.Second)
	if r := get(); !r.Hit || !r.Prefetch {
		t.Fatalf("no prefetch with 9%% left after 2 hits: %+v", r)
	}
	if r := get(); r.Prefetch {
		t.Fatal("second prefetch while the first runs")
	}
	c.PrefetchDone(q.Key())
	if r := get(); !r.Prefetch {
		t.Fatal("no prefetch after the first one ended")
	}
	// A refresh replaces the entry; the new one starts with no hits.
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "p.example. 100 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(95 * time.Second)
	if r := get(); r.Prefetch {
		t.Fatal("prefetch after a single hit on the new entry")
	}
}
