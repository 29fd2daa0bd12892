package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/cache"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// TestPrefetchBackoff: while the backend is down, hits on an entry near
// expiry do not start a refresh each; after a failed prefetch the entry is
// not prefetched again until the failure recheck interval (RFC 8767 §5) has
// passed, and those hits do not allocate.
func TestPrefetchBackoff(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 1000 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, set := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "hot.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	serve(t, r, req, server.UDP)
	serve(t, r, req, server.UDP)
	clk.Advance(901 * time.Second) // 99 s of 1000 left: prefetch range
	ex.set(func(*dns.Msg) (*dns.Msg, error) { return nil, errDown })

	// hits runs n hits one after the other, each waiting for the prefetch
	// it may have started to fail: the worst case for a flag cleared on
	// failure.
	hits := func(n int) {
		t.Helper()
		for range n {
			if _, ok := r.ServeFast(buf(), req, server.UDP); !ok {
				t.Fatal("miss on a fresh entry")
			}
			r.wg.Wait()
		}
	}
	hits(200)
	t.Logf("200 hits near expiry, backend down: %d exchanges", ex.ncalls()-1)
	if n := ex.ncalls() - 1; n < 1 || n > 2 {
		t.Errorf("200 hits near expiry with the backend down made %d exchanges, want 1 or 2", n)
	}
	dst := buf()
	if n := testing.AllocsPerRun(200, func() {
		if _, ok := r.ServeFast(dst, req, server.UDP); !ok {
			t.Fatal("miss")
		}
		r.wg.Wait() // a refresh started here would count its allocations
	}); n != 0 {
		t.Errorf("a hit in the backoff window allocates %v times", n)
	}

	// Past the recheck interval the entry, still fresh, is refreshed again.
	before := ex.ncalls()
	clk.Advance(cache.RecheckInterval)
	ex.set(records(t, dns.RcodeSuccess, "x. 1000 IN A 192.0.2.2"))
	hits(50)
	if n := ex.ncalls() - before; n != 1 {
		t.Errorf("after the recheck interval: %d exchanges, want 1", n)
	}
	out, _ := r.ServeFast(buf(), req, server.UDP)
	if m := unpack(t, out); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.2" || m.Answer[0].Header().Ttl != 1000 {
		t.Errorf("after the backend came back: %v, want the refreshed answer", m.Answer)
	}
	if got, want := metricstest.Value(t, set, prefetchSeries), float64(ex.ncalls()-1); got != want {
		t.Errorf("coredns_cache_prefetch_total = %v, want %v (one per exchange)", got, want)
	}
}

// TestPrefetchFailureServesStale: an entry whose prefetch failed expires
// and is then served stale for the rest of the recheck interval without
// asking the backend, as after a failed miss (RFC 8767 §5).
func TestPrefetchFailureServesStale(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 100 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "gone.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)
	serve(t, r, req, server.UDP)
	clk.Advance(95 * time.Second)
	ex.set(records(t, dns.RcodeServerFailure))
	serve(t, r, req, server.UDP) // starts the prefetch, which gets SERVFAIL
	r.wg.Wait()
	calls := ex.ncalls()
	if calls != 2 {
		t.Fatalf("%d exchanges, want the miss and one prefetch", calls)
	}

	clk.Advance(10 * time.Second) // expired 5 s ago, 20 s of recheck left
	out, hit := serve(t, r, req, server.UDP)
	if !hit {
		t.Fatal("expired entry after a failed prefetch: miss, want stale from the cache")
	}
	if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].Header().Ttl != cache.StaleTTL {
		t.Errorf("stale answer %v", m)
	}
	clk.Advance(cache.RecheckInterval)
	if _, hit := serve(t, r, req, server.UDP); hit {
		t.Error("past the recheck interval the backend is not asked again")
	}
	if n := ex.ncalls(); n != calls+1 {
		t.Errorf("%d exchanges, want %d", n, calls+1)
	}
}
