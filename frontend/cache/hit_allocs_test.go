package cache

import (
	"testing"

	"github.com/miekg/dns"
)

func TestGetAllocs(t *testing.T) {
	c := newCache(t, DefaultConfig(), nil)
	b := req(t, "a.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "a.example. 60 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	dst := buf()
	if n := testing.AllocsPerRun(1000, func() { c.Get(dst, q, 1232) }); n != 0 {
		t.Errorf("Get allocates %v times per hit", n)
	}
}
