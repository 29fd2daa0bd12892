package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestNegativeBehindCNAME: a CNAME chain that does not end in the asked
// type is no positive answer. With an SOA it is NODATA (or, for NXDOMAIN,
// the denial of the chain's last name) and lives for the negative TTL
// (RFC 2308 §5, RFC 6604 §3); without one it is not cached (RFC 2308 §5:
// negative answers without an SOA SHOULD NOT be cached).
func TestNegativeBehindCNAME(t *testing.T) {
	const soa = "example. 3600 IN SOA ns.example. h.example. 1 7200 900 1209600 60"
	tests := []struct {
		name     string
		qtype    uint16
		rcode    int
		answers  []string
		ns       []string
		wantKind Kind
		wantTTL  uint32 // entry TTL in seconds; 0 = not cached
	}{
		{"NODATA behind a CNAME: SOA TTL", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example."}, []string{soa}, Denial, 60},
		{"NODATA behind a chain of two", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME a.example.", "a.example. 3600 IN CNAME cdn.example."}, []string{soa}, Denial, 60},
		{"NODATA behind a CNAME, records of another owner", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example.", "other.example. 3600 IN AAAA 2001:db8::1"}, []string{soa}, Denial, 60},
		{"incomplete chain without SOA: not cached", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example."}, nil, noCache, 0},
		{"CNAME loop without SOA: not cached", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example.", "cdn.example. 3600 IN CNAME www.example."}, nil, noCache, 0},
		{"alias with two targets: not cached", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME a.example.", "www.example. 3600 IN CNAME b.example.", "a.example. 300 IN AAAA 2001:db8::1"}, nil, noCache, 0},
		{"NXDOMAIN behind a CNAME: SOA TTL", dns.TypeAAAA, dns.RcodeNameError,
			[]string{"www.example. 3600 IN CNAME gone.example."}, []string{soa}, Denial, 60},
		{"NXDOMAIN behind a CNAME without SOA: not cached", dns.TypeAAAA, dns.RcodeNameError,
			[]string{"www.example. 3600 IN CNAME gone.example."}, nil, noCache, 0},
		{"complete chain: positive, smallest TTL", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example.", "cdn.example. 30 IN AAAA 2001:db8::1"}, nil, Success, 30},
		{"complete chain, names in another case", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"WWW.Example. 3600 IN CNAME Cdn.EXAMPLE.", "cdn.example. 30 IN AAAA 2001:db8::1"}, nil, Success, 30},
		{"complete chain with an SOA: positive", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example.", "cdn.example. 30 IN AAAA 2001:db8::1"}, []string{soa}, Success, 30},
		{"DNAME and its synthesized CNAME", dns.TypeAAAA, dns.RcodeSuccess,
			[]string{"example. 3600 IN DNAME example.net.", "www.example. 3600 IN CNAME www.example.net.", "www.example.net. 40 IN AAAA 2001:db8::1"}, nil, Success, 40},
		{"a CNAME query answered with the CNAME", dns.TypeCNAME, dns.RcodeSuccess,
			[]string{"www.example. 3600 IN CNAME cdn.example."}, nil, Success, 3600},
		{"an ANY query answered at the name", dns.TypeANY, dns.RcodeSuccess,
			[]string{"www.example. 300 IN TXT \"x\""}, nil, Success, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			c := newCache(t, DefaultConfig(), clk)
			b := req(t, "www.example.", tt.qtype, nil)
			q := parse(t, b)
			e, err := c.Set(q.Key(), answer(t, b, tt.rcode, rrs(t, tt.answers...), rrs(t, tt.ns...)))
			if err != nil {
				t.Fatal(err)
			}
			if e.kind != tt.wantKind || (tt.wantTTL > 0 && e.ttl != tt.wantTTL) {
				t.Fatalf("kind %d TTL %d, want kind %d TTL %d", e.kind, e.ttl, tt.wantKind, tt.wantTTL)
			}
			if got := unpack(t, c.Write(buf(), e, q, 512)); got.Rcode != tt.rcode || len(got.Answer) != len(tt.answers) {
				t.Errorf("answer to this query: rcode %d, %d records; want the backend's", got.Rcode, len(got.Answer))
			}
			out, res := c.Get(buf(), q, 512)
			if res.Hit != (tt.wantTTL > 0) {
				t.Fatalf("hit %v, want %v", res.Hit, tt.wantTTL > 0)
			}
			if !res.Hit {
				return
			}
			if wantNeg := tt.wantKind == Denial; res.Kind.negative() != wantNeg {
				t.Errorf("hit kind %d", res.Kind)
			}
			m := unpack(t, out)
			if m.Rcode != tt.rcode || len(m.Answer) != len(tt.answers) {
				t.Errorf("cached answer: rcode %d, %d records", m.Rcode, len(m.Answer))
			}
			for _, ttl := range ttls(m) {
				if ttl > tt.wantTTL && tt.wantKind == Denial {
					t.Errorf("record TTL %d over the negative TTL %d: a client would keep the denial longer", ttl, tt.wantTTL)
				}
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
