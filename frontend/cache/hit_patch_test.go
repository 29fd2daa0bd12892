package cache

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestHitPatchesCopy(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	first := req(t, "www.example.com.", dns.TypeA, nil)
	resp := answer(t, first, dns.RcodeSuccess, rrs(t,
		"www.example.com. 300 IN CNAME web.example.com.",
		"web.example.com. 120 IN A 192.0.2.1"), nil)
	before := resp.Copy()
	if _, err := c.Set(parse(t, first).Key(), resp); err != nil {
		t.Fatal(err)
	}
	if resp.String() != before.String() {
		t.Fatal("Set modified the backend's message")
	}
	clk.Advance(100 * time.Second)

	tests := []struct {
		name    string
		id      uint16
		qname   string
		rd, cd  bool
		wantTTL []uint32
	}{
		{"aged, case restored", 0xabcd, "WwW.ExAmPlE.cOm.", true, false, []uint32{200, 20}},
		{"another ID and case, RD clear", 7, "www.EXAMPLE.com.", false, false, []uint32{200, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := req(t, tt.qname, dns.TypeA, func(m *dns.Msg) { m.Id, m.RecursionDesired = tt.id, tt.rd })
			out, res := c.Get(buf(), parse(t, b), 512)
			if !res.Hit || res.Kind != Success {
				t.Fatalf("result %+v", res)
			}
			m := unpack(t, out)
			if m.Id != tt.id || !m.Response || m.RecursionDesired != tt.rd || !m.RecursionAvailable || m.Truncated {
				t.Errorf("header %+v", m.MsgHdr)
			}
			if m.Question[0].Name != tt.qname {
				t.Errorf("question %q, want %q", m.Question[0].Name, tt.qname)
			}
			// The CNAME owner is compressed to the question and follows its case.
			if m.Answer[0].Header().Name != tt.qname {
				t.Errorf("answer owner %q, want %q", m.Answer[0].Header().Name, tt.qname)
			}
			if got := ttls(m); !slices.Equal(got, tt.wantTTL) {
				t.Errorf("TTLs %v, want %v", got, tt.wantTTL)
			}
			if m.IsEdns0() != nil {
				t.Error("OPT in the answer to a query without one")
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		clk.Advance(20 * time.Second)
		if _, res := c.Get(buf(), parse(t, first), 512); res.Hit {
			t.Error("hit after the smallest TTL ran out")
		}
	})
}
