package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestOverloaded(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, set := newResolver(t, DefaultConfig(), ex, clk)
	cold := pack(t, "cold.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	m := unpack(t, r.Overloaded(buf(), cold, server.UDP))
	if m.Rcode != dns.RcodeServerFailure || m.IsEdns0() == nil || m.Question[0].Name != "cold.example." {
		t.Errorf("overloaded answer %v", m)
	}
	warm := pack(t, "warm.example.", dns.TypeA, nil)
	serve(t, r, warm, server.UDP)
	clk.Advance(2 * time.Minute)
	if m := unpack(t, r.Overloaded(buf(), warm, server.UDP)); m.Rcode != dns.RcodeSuccess || m.Answer[0].Header().Ttl != 30 {
		t.Errorf("overloaded with a stale entry: %v", m)
	}
	if got := metricstest.Value(t, set, servedStaleSeries); got != 1 {
		t.Errorf("coredns_cache_served_stale_total = %v", got)
	}
}
