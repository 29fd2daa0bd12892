package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestClusterNegativeMaxTTL: a denial of a name of the cluster domain is
// kept at most ClusterNegativeMaxTTL, whatever its SOA says, so that a name
// created there is found within it; denials elsewhere and positive
// answers keep their TTLs, and 0 caches no denial of the cluster domain.
func TestClusterNegativeMaxTTL(t *testing.T) {
	soa30 := "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"
	for _, tt := range []struct {
		name    string
		cap     time.Duration
		qname   string
		rcode   int
		records []string // answer section
		ns      string
		wantTTL uint32 // of the entry; 0: not cached
		wantSOA uint32 // TTL of the SOA served, for a denial
	}{
		{"NXDOMAIN in the cluster", 5 * time.Second, "web.team-a.svc.Cluster.Local.", dns.RcodeNameError, nil, soa30, 5, 5},
		{"NODATA in the cluster", 5 * time.Second, "pod-0.db.team-a.svc.cluster.local.", dns.RcodeSuccess, nil, soa30, 5, 5},
		{"the domain itself", 5 * time.Second, "cluster.local.", dns.RcodeSuccess, nil, soa30, 5, 5},
		{"shorter than the cap", 5 * time.Second, "x.cluster.local.", dns.RcodeNameError, nil, "cluster.local. 3 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 3", 3, 3},
		{"outside the cluster", 5 * time.Second, "nosuch.example.com.", dns.RcodeNameError, nil, "example.com. 30 IN SOA ns.example.com. h.example.com. 1 7200 1800 86400 30", 30, 30},
		{"a name ending like it", 5 * time.Second, "a.xcluster.local.", dns.RcodeNameError, nil, "local. 30 IN SOA ns.local. h.local. 1 7200 1800 86400 30", 30, 30},
		{"positive in the cluster", 5 * time.Second, "web.team-a.svc.cluster.local.", dns.RcodeSuccess, []string{"web.team-a.svc.cluster.local. 30 IN A 10.96.0.20"}, "", 30, 0},
		{"0 caches none", 0, "web.team-a.svc.cluster.local.", dns.RcodeNameError, nil, soa30, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ClusterDomain = "cluster.local"
			cfg.ClusterNegativeMaxTTL = tt.cap
			c := newCache(t, cfg, newClock())
			b := req(t, tt.qname, dns.TypeA, nil)
			q := parse(t, b)
			var ns []dns.RR
			if tt.ns != "" {
				ns = rrs(t, tt.ns)
			}
			var an []dns.RR
			if len(tt.records) > 0 {
				an = rrs(t, tt.records...)
			}
			e, err := c.Set(q.Key(), answer(t, b, tt.rcode, an, ns))
			if err != nil {
				t.Fatal(err)
			}
			out, res := c.Get(buf(), q, 512)
			if tt.wantTTL == 0 {
				if res.Hit {
					t.Fatalf("cached (TTL %d), want not cached", e.ttl)
				}
				return
			}
			if !res.Hit || e.ttl != tt.wantTTL {
				t.Fatalf("hit %v, entry TTL %d, want %d", res.Hit, e.ttl, tt.wantTTL)
			}
			if m := unpack(t, out); tt.wantSOA > 0 && (len(m.Ns) != 1 || m.Ns[0].Header().Ttl != tt.wantSOA) {
				t.Errorf("authority %v, want the SOA with TTL %d", m.Ns, tt.wantSOA)
			}
		})
	}
}
