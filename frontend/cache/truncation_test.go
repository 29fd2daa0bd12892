package cache

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

func TestEDNSAndTruncation(t *testing.T) {
	c := newCache(t, DefaultConfig(), newClock())
	base := req(t, "big.example.", dns.TypeA, nil)
	var as []string
	for i := range 40 { // 40 × 16 bytes with compression: over 512, under 1232
		as = append(as, fmt.Sprintf("big.example. 60 IN A 192.0.2.%d", i))
	}
	if _, err := c.Set(parse(t, base).Key(), answer(t, base, dns.RcodeSuccess, rrs(t, as...), nil)); err != nil {
		t.Fatal(err)
	}
	doKey := req(t, "big.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(4096, true) })
	if _, err := c.Set(parse(t, doKey).Key(), answer(t, doKey, dns.RcodeSuccess, rrs(t, as...), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		edit    func(*dns.Msg)
		tcp     bool
		wantTC  bool
		wantOPT bool
		wantDO  bool
	}{
		{"no EDNS over UDP: 512", nil, false, true, false, false},
		{"no EDNS over TCP", nil, true, false, false, false},
		{"EDNS 4096", func(m *dns.Msg) { m.SetEdns0(4096, false) }, false, false, true, false},
		{"EDNS 600", func(m *dns.Msg) { m.SetEdns0(600, false) }, false, true, true, false},
		{"EDNS DO echoed", func(m *dns.Msg) { m.SetEdns0(4096, true) }, false, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := parse(t, req(t, "big.example.", dns.TypeA, tt.edit))
			out, res := c.Get(buf(), q, q.Limit(tt.tcp))
			if !res.Hit {
				t.Fatal("miss")
			}
			if len(out) > q.Limit(tt.tcp) {
				t.Errorf("%d bytes over the limit %d", len(out), q.Limit(tt.tcp))
			}
			m := unpack(t, out)
			if m.Truncated != tt.wantTC {
				t.Errorf("TC %v, want %v", m.Truncated, tt.wantTC)
			}
			if tt.wantTC && (len(m.Answer) != 0 || len(m.Question) != 1) {
				t.Errorf("truncated answer has %d records, %d questions", len(m.Answer), len(m.Question))
			}
			if !tt.wantTC && len(m.Answer) != 40 {
				t.Errorf("%d answers", len(m.Answer))
			}
			opt := m.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT %v, want %v", opt != nil, tt.wantOPT)
			}
			if opt != nil && (opt.Do() != tt.wantDO || opt.UDPSize() != 1232) {
				t.Errorf("OPT %v", opt)
			}
		})
	}
}
