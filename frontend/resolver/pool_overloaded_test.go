package resolver

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/frontend/upstream"
)

// TestPoolOverloadedIsNoBackendFailure: a miss of an expired entry that the
// frontend's own pool refuses (upstream.ErrOverloaded) is answered stale,
// but the entry is not marked as a failed refresh: the next miss asks the
// backend again instead of being served stale for cache.RecheckInterval.
// A failure of the backend itself still is (TestServeStale).
func TestPoolOverloadedIsNoBackendFailure(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "busy.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)

	clk.Advance(61 * time.Second)
	ex.set(func(*dns.Msg) (*dns.Msg, error) { return nil, fmt.Errorf("exchange: %w", upstream.ErrOverloaded) })
	out, hit := serve(t, r, req, server.UDP)
	if m := unpack(t, out); hit || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].Header().Ttl != 30 {
		t.Fatalf("refused by the pool: hit %v, answer %v; want a stale answer from a miss", hit, m)
	}

	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.2"))
	out, hit = serve(t, r, req, server.UDP)
	if hit {
		t.Fatal("the next query was served stale from the cache: the pool's overload was taken for a backend failure")
	}
	if m := unpack(t, out); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.2" || m.Answer[0].Header().Ttl != 60 {
		t.Errorf("next answer %v, want the backend's new one", m.Answer)
	}
	if n := ex.ncalls(); n != 3 {
		t.Errorf("%d exchanges, want 3", n)
	}
}
