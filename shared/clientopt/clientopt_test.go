package clientopt

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

func query(opts ...dns.EDNS0) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().Option = opts
	return m
}

func TestTake(t *testing.T) {
	cookie := &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}
	for _, tc := range []struct {
		name string
		m    *dns.Msg
		want netip.Addr
		ok   bool
	}{
		{"v4", query(Option(netip.MustParseAddr("10.1.2.3")), cookie), netip.MustParseAddr("10.1.2.3"), true},
		{"v4-mapped", query(Option(netip.MustParseAddr("::ffff:10.1.2.3"))), netip.MustParseAddr("10.1.2.3"), true},
		{"v6", query(Option(netip.MustParseAddr("fd00::1"))), netip.MustParseAddr("fd00::1"), true},
		{"bad length", query(&dns.EDNS0_LOCAL{Code: Code, Data: []byte{1, 2, 3}}), netip.Addr{}, false},
		{"two copies", query(Option(netip.MustParseAddr("10.0.0.1")), Option(netip.MustParseAddr("10.0.0.2"))), netip.MustParseAddr("10.0.0.2"), true},
		{"none", query(cookie), netip.Addr{}, false},
		{"no OPT", func() *dns.Msg { m := new(dns.Msg); m.SetQuestion("a.", dns.TypeA); return m }(), netip.Addr{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Through the wire, as the backend gets it.
			b, err := tc.m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			m := new(dns.Msg)
			if err := m.Unpack(b); err != nil {
				t.Fatal(err)
			}
			got, ok := Take(m)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Take: %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
			if Has(m) {
				t.Error("the option is still there after Take")
			}
			if opt := m.IsEdns0(); opt != nil && tc.name == "v4" && len(opt.Option) != 1 {
				t.Errorf("other options lost: %v", opt.Option)
			}
		})
	}
}

func TestWithout(t *testing.T) {
	cookie := &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}
	m := query(Option(netip.MustParseAddr("10.1.2.3")), cookie)
	c := Without(m)
	if Has(c) || !Has(m) {
		t.Fatalf("Without: copy has it %v, original has it %v; want false, true", Has(c), Has(m))
	}
	if opt := c.IsEdns0(); len(opt.Option) != 1 || opt.Option[0] != cookie {
		t.Errorf("Without dropped other options: %v", opt.Option)
	}
	if plain := query(cookie); Without(plain) != plain {
		t.Error("Without copied a message without the option")
	}
}
