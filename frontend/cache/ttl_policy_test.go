package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestTTLPolicy(t *testing.T) {
	soa := func(ttl, minttl uint32) dns.RR {
		return &dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
			Ns: "ns.example.", Mbox: "h.example.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: minttl}
	}
	tests := []struct {
		name     string
		cfg      func(*Config)
		rcode    int
		answers  []string
		ns       []dns.RR
		wantKind Kind
		wantTTL  uint32 // entry TTL in seconds; 0 = not cached
	}{
		{"positive: smallest TTL", nil, dns.RcodeSuccess, []string{"n.example. 30 IN A 192.0.2.1", "n.example. 90 IN A 192.0.2.2"}, nil, Success, 30},
		{"positive: max TTL", nil, dns.RcodeSuccess, []string{"n.example. 86400 IN A 192.0.2.1"}, nil, Success, 3600},
		{"positive: min TTL", func(c *Config) { c.MinTTL = 10 * time.Second }, dns.RcodeSuccess, []string{"n.example. 2 IN A 192.0.2.1"}, nil, Success, 10},
		{"positive: TTL 0 not cached", nil, dns.RcodeSuccess, []string{"n.example. 0 IN A 192.0.2.1"}, nil, noCache, 0},
		{"NXDOMAIN: SOA MINIMUM", nil, dns.RcodeNameError, nil, []dns.RR{soa(3600, 60)}, Denial, 60},
		{"NXDOMAIN: SOA TTL", nil, dns.RcodeNameError, nil, []dns.RR{soa(20, 600)}, Denial, 20},
		{"NODATA: negative max TTL", func(c *Config) { c.NegativeMaxTTL = 15 * time.Second }, dns.RcodeSuccess, nil, []dns.RR{soa(600, 600)}, Denial, 15},
		{"NXDOMAIN without SOA not cached", nil, dns.RcodeNameError, nil, nil, noCache, 0},
		{"SERVFAIL: short TTL", nil, dns.RcodeServerFailure, nil, nil, ServFail, 5},
		{"SERVFAIL caching off", func(c *Config) { c.ServfailTTL = 0 }, dns.RcodeServerFailure, nil, nil, noCache, 0},
		{"REFUSED not cached", nil, dns.RcodeRefused, nil, nil, noCache, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			clk := newClock()
			c := newCache(t, cfg, clk)
			b := req(t, "n.example.", dns.TypeA, nil)
			q := parse(t, b)
			e, err := c.Set(q.Key(), answer(t, b, tt.rcode, rrs(t, tt.answers...), tt.ns))
			if err != nil {
				t.Fatal(err)
			}
			if e.kind != tt.wantKind {
				t.Fatalf("kind %d, want %d", e.kind, tt.wantKind)
			}
			out, res := c.Get(buf(), q, 512)
			if res.Hit != (tt.wantTTL > 0) {
				t.Fatalf("hit %v", res.Hit)
			}
			if !res.Hit {
				// Still answerable through Write, with the backend's TTLs.
				m := unpack(t, c.Write(buf(), e, q, 512))
				if m.Rcode != tt.rcode {
					t.Errorf("rcode %d", m.Rcode)
				}
				return
			}
			m := unpack(t, out)
			if m.Rcode != tt.rcode {
				t.Errorf("rcode %d, want %d", m.Rcode, tt.rcode)
			}
			for _, ttl := range ttls(m) {
				if ttl < tt.wantTTL {
					t.Errorf("record TTL %d below the entry TTL %d", ttl, tt.wantTTL)
				}
			}
			if tt.wantKind == Denial && ttls(m)[0] != tt.wantTTL {
				t.Errorf("SOA TTL %d, want %d (RFC 2308 §3)", ttls(m)[0], tt.wantTTL)
			}
			clk.Advance(time.Duration(tt.wantTTL)*time.Second - time.Millisecond)
			if _, res := c.Get(buf(), q, 512); !res.Hit {
				t.Error("miss just before expiry")
			}
			clk.Advance(time.Millisecond)
			if _, res := c.Get(buf(), q, 512); res.Hit {
				t.Error("hit at expiry")
			}
		})
	}
}
