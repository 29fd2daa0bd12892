package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func first(b []byte, _ bool) []byte { return b }

func TestPrefetch(t *testing.T) {
	ex := &fakeExchanger{got: make(chan *dns.Msg, 10)}
	ex.set(records(t, dns.RcodeSuccess, "x. 100 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, set := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "Hot.Example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	serve(t, r, req, server.UDP)
	<-ex.got
	serve(t, r, req, server.UDP) // hit 1
	clk.Advance(91 * time.Second)
	if _, hit := serve(t, r, req, server.UDP); !hit { // hit 2, 9% left: prefetch
		t.Fatal("miss")
	}
	select {
	case m := <-ex.got:
		if m.Question[0].Name != "hot.example." || !m.IsEdns0().Do() {
			t.Errorf("prefetch query %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no prefetch")
	}
	// Wait for the refreshed entry: its TTL is whole again.
	q := new(dnswire.Query)
	if err := dnswire.ParseQuery(req, q); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		out, res := r.Cache().Get(buf(), q, 1232)
		if res.Hit && unpack(t, out).Answer[0].Header().Ttl == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("prefetched entry not stored")
		}
	}
	clk.Advance(20 * time.Second) // the original entry would have expired
	if _, hit := serve(t, r, req, server.UDP); !hit {
		t.Error("miss after the prefetch")
	}
	if got := metricstest.Value(t, set, prefetchSeries); got != 1 {
		t.Errorf("coredns_cache_prefetch_total = %v", got)
	}
	if n := ex.ncalls(); n != 2 {
		t.Errorf("%d exchanges, want 2", n)
	}
}

func TestPrefetchServfailKeepsEntry(t *testing.T) {
	ex := &fakeExchanger{got: make(chan *dns.Msg, 10)}
	ex.set(records(t, dns.RcodeSuccess, "x. 100 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "keep.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)
	<-ex.got
	serve(t, r, req, server.UDP)
	clk.Advance(91 * time.Second)
	ex.set(records(t, dns.RcodeServerFailure))
	serve(t, r, req, server.UDP) // starts the prefetch, which gets SERVFAIL
	<-ex.got
	r.Close() // waits for the prefetch to finish
	out, hit := r.ServeFast(buf(), req, server.UDP)
	if !hit {
		t.Fatal("the SERVFAIL of a prefetch replaced the entry")
	}
	if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || m.Answer[0].Header().Ttl != 9 {
		t.Errorf("answer %v", m)
	}
}
