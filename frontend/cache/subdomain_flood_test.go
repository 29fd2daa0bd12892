package cache

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// TestRandomSubdomainFlood shows that names asked for once only churn the
// probation segments: a hot set asked for twice survives a flood of 20
// times the cache's capacity.
func TestRandomSubdomainFlood(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Size, cfg.NegativeSize = 2048, 2048
	clk := newClock()
	c := newCache(t, cfg, clk)
	set := func(name string, rcode int) *dnswire.Query {
		b := req(t, name, dns.TypeA, nil)
		q := parse(t, b)
		var ans []dns.RR
		var ns []dns.RR
		if rcode == dns.RcodeSuccess {
			ans = rrs(t, name+" 3600 IN A 192.0.2.1")
		} else {
			ns = rrs(t, "example. 3600 IN SOA ns.example. h.example. 1 1 1 1 3600")
		}
		if _, err := c.Set(q.Key(), answer(t, b, rcode, ans, ns)); err != nil {
			t.Fatal(err)
		}
		return q
	}
	const hot = 200
	var hotSet []*dnswire.Query
	for i := range hot {
		rcode := dns.RcodeSuccess
		if i%2 == 1 {
			rcode = dns.RcodeNameError // hot NXDOMAINs too: search-path expansions
		}
		q := set(fmt.Sprintf("hot%d.example.", i), rcode)
		if _, res := c.Get(buf(), q, 512); !res.Hit { // the second use
			t.Fatal("hot entry missing right after insertion")
		}
		hotSet = append(hotSet, q)
	}
	for i := range 20 * 2048 {
		rcode := dns.RcodeNameError
		if i%4 == 0 {
			rcode = dns.RcodeSuccess // wildcard zones answer random names too
		}
		set(fmt.Sprintf("r%x.flood.example.", i*7919), rcode)
	}
	missing := 0
	for _, q := range hotSet {
		if _, res := c.Get(buf(), q, 512); !res.Hit {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d hot entries evicted by the flood", missing, hot)
	}
	st := c.Stats()
	if st.Evictions[0] == 0 || st.Evictions[1] == 0 {
		t.Errorf("the flood evicted nothing: %+v", st)
	}
}
