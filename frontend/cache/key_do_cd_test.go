package cache

import (
	"testing"

	"github.com/miekg/dns"
)

func TestKeyedByDOAndCD(t *testing.T) {
	c := newCache(t, DefaultConfig(), newClock())
	plain := req(t, "k.example.", dns.TypeA, nil)
	if _, err := c.Set(parse(t, plain).Key(), answer(t, plain, dns.RcodeSuccess, rrs(t, "k.example. 60 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*dns.Msg)
		hit  bool
	}{
		{"same", nil, true},
		{"EDNS without DO shares the entry", func(m *dns.Msg) { m.SetEdns0(1232, false) }, true},
		{"DO", func(m *dns.Msg) { m.SetEdns0(1232, true) }, false},
		{"CD", func(m *dns.Msg) { m.CheckingDisabled = true }, false},
		{"other type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA }, false},
		{"other class", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := parse(t, req(t, "K.example.", dns.TypeA, tt.edit))
			out, res := c.Get(buf(), q, 512)
			if res.Hit != tt.hit {
				t.Fatalf("hit %v, want %v", res.Hit, tt.hit)
			}
			if res.Hit && unpack(t, out).CheckingDisabled != q.CD() {
				t.Error("CD not echoed")
			}
		})
	}
}
