package cache

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// FuzzCache stores arbitrary backend answers for arbitrary queries and
// checks that every answer written is well formed, answers the query, fits
// the limit, and that the backend's message is left alone.
func FuzzCache(f *testing.F) {
	q := req(f, "www.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	r, _ := answer(f, q, dns.RcodeSuccess, rrs(f, "www.example.com. 60 IN A 192.0.2.1"), nil).Pack()
	f.Add(q, r, uint16(10), false)
	nx := req(f, "nx.example.", dns.TypeAAAA, nil)
	r, _ = answer(f, nx, dns.RcodeNameError, nil, rrs(f, "example. 60 IN SOA ns.example. h.example. 1 1 1 1 60")).Pack()
	f.Add(nx, r, uint16(100), true)
	nodata := req(f, "www.example.", dns.TypeAAAA, nil)
	r, _ = answer(f, nodata, dns.RcodeSuccess, rrs(f, "www.example. 3600 IN CNAME cdn.example."),
		rrs(f, "example. 3600 IN SOA ns.example. h.example. 1 1 1 1 60")).Pack()
	f.Add(nodata, r, uint16(59), false)
	r, _ = answer(f, nodata, dns.RcodeSuccess, rrs(f, "www.example. 60 IN CNAME cdn.example.", "cdn.example. 60 IN CNAME www.example."), nil).Pack()
	f.Add(nodata, r, uint16(1), false)

	f.Fuzz(func(t *testing.T, qb, rb []byte, advance uint16, tcp bool) {
		var query dnswire.Query
		if dnswire.ParseQuery(qb, &query) != nil {
			return
		}
		resp := new(dns.Msg)
		if resp.Unpack(rb) != nil {
			return
		}
		before, _ := resp.Pack()
		clk := newClock()
		cfg := DefaultConfig()
		cfg.Size, cfg.NegativeSize = 16, 16
		c := newCache(t, cfg, clk)
		e, err := c.Set(query.Key(), resp)
		if after, _ := resp.Pack(); !bytes.Equal(before, after) {
			t.Fatal("Set modified the backend's message")
		}
		if err != nil {
			return
		}
		limit := query.Limit(tcp)
		check := func(out []byte) {
			if len(out) > limit {
				t.Fatalf("%d bytes over the limit %d", len(out), limit)
			}
			m := new(dns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("answer does not unpack: %v\n%x", err, out)
			}
			if m.Id != query.ID || len(m.Question) != 1 || !strings.EqualFold(m.Question[0].Name, mustName(t, query.Name)) ||
				m.Question[0].Qtype != query.QType || m.Question[0].Qclass != query.QClass {
				t.Fatalf("answer %v does not match the query", m)
			}
			if (m.IsEdns0() != nil) != query.HasOPT {
				t.Fatal("OPT presence differs from the query's")
			}
		}
		check(c.Write(buf(), e, &query, limit))
		clk.Advance(time.Duration(advance) * time.Second)
		if out, res := c.Get(buf(), &query, limit); res.Hit {
			check(out)
		}
		if out, _, ok := c.GetStale(buf(), &query, limit); ok {
			check(out)
		}
	})
}

func mustName(t *testing.T, wire []byte) string {
	s, _, err := dns.UnpackDomainName(wire, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
