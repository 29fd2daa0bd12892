package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAbsent: only a fresh NXDOMAIN without answer records says a name is
// absent; NODATA (the name exists, as a namespace's does), a positive
// answer, a SERVFAIL, an NXDOMAIN after a CNAME (which denies the target,
// RFC 6604 §2.1) or an expired NXDOMAIN do not. Below agrees with it.
func TestAbsent(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	soa := rrs(t, "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")
	for _, tt := range []struct {
		name    string
		rcode   int
		answers []dns.RR
		ns      []dns.RR
		absent  bool
	}{
		{"net.svc.cluster.local.", dns.RcodeNameError, nil, soa, true},
		{"team-a.svc.cluster.local.", dns.RcodeSuccess, nil, soa, false},
		{"web.team-a.svc.cluster.local.", dns.RcodeSuccess, rrs(t, "web.team-a.svc.cluster.local. 30 IN A 10.0.0.1"), nil, false},
		{"broken.svc.cluster.local.", dns.RcodeServerFailure, nil, nil, false},
		{"alias.svc.cluster.local.", dns.RcodeNameError, rrs(t, "alias.svc.cluster.local. 30 IN CNAME gone.example."), soa, false},
	} {
		b := req(t, tt.name, dns.TypeA, nil)
		key := parse(t, b).Key()
		if _, err := c.Set(key, answer(t, b, tt.rcode, tt.answers, tt.ns)); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := c.Absent(key); got != tt.absent {
			t.Errorf("%s (rcode %s): Absent %v, want %v", tt.name, dns.RcodeToString[tt.rcode], got, tt.absent)
		}
		under := parse(t, req(t, "x."+tt.name, dns.TypeA, nil))
		if _, _, ok := c.Below(buf(), under, key, 512); ok != tt.absent {
			t.Errorf("%s (rcode %s): Below %v, Absent %v", tt.name, dns.RcodeToString[tt.rcode], ok, tt.absent)
		}
	}
	key := parse(t, req(t, "net.svc.cluster.local.", dns.TypeA, nil)).Key()
	if c.Absent(parse(t, req(t, "other.svc.cluster.local.", dns.TypeA, nil)).Key()) {
		t.Error("Absent: a name never cached")
	}
	clk.Advance(6 * time.Second)
	if c.Absent(key) {
		t.Error("Absent: an NXDOMAIN past its TTL")
	}
}
