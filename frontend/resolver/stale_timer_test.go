package resolver

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// hangUntil answers with fn once release is closed, or fails when ctx ends.
func hangUntil(release <-chan struct{}, fn func(*dns.Msg) (*dns.Msg, error)) func(*dns.Msg) (*dns.Msg, error) {
	return func(m *dns.Msg) (*dns.Msg, error) {
		<-release
		return fn(m)
	}
}

// TestStaleAtClientResponseTimer: an expired entry whose refresh hangs
// upstream is answered stale once the client response timer (RFC 8767 §5,
// 1.8s) runs out, and the refresh, when the backend finally answers, puts
// the fresh answer in the cache.
func TestStaleAtClientResponseTimer(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	cfg := DefaultConfig()
	cfg.Cache.ServeStale = 10 * time.Minute
	r, set := newResolver(t, cfg, ex, clk)
	req := pack(t, "slow-refresh.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)

	clk.Advance(61 * time.Second) // expired, within the serve-stale window
	release := make(chan struct{})
	// Without the timer, ServeSlow would wait for the backend: let it
	// answer after 4s, so that the test fails rather than hangs.
	stop := time.AfterFunc(4*time.Second, func() { close(release) })
	t.Cleanup(func() {
		if stop.Stop() {
			close(release)
		}
	})
	ex.set(hangUntil(release, records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.2")))
	start := time.Now()
	out, hit := serve(t, r, req, server.UDP)
	elapsed := time.Since(start)
	if hit {
		t.Fatal("an expired entry was a hit before any refresh failed")
	}
	m := unpack(t, out)
	if elapsed < 1500*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("answered after %v, want the client response timer (1.5s to 3s)", elapsed)
	}
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer %v, want the stale 192.0.2.1", m)
	}
	if got := metricstest.Value(t, set, servedStaleSeries); got != 1 {
		t.Errorf("coredns_cache_served_stale_total = %v, want 1", got)
	}

	// The backend answers at last: the exchange that went on stores it.
	if stop.Stop() {
		close(release)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		out, hit := r.ServeFast(buf(), req, server.UDP)
		if hit {
			if m := unpack(t, out); len(m.Answer) == 1 && m.Answer[0].(*dns.A).A.String() == "192.0.2.2" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the fresh answer never reached the cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := ex.ncalls(); n != 2 {
		t.Errorf("%d exchanges, want 2 (the first miss and one refresh)", n)
	}
}

// TestMissWithoutStaleWaits: with nothing to serve stale, a miss waits for
// a backend slower than the client response timer, within the answer
// timeout, and gets its answer.
func TestMissWithoutStaleWaits(t *testing.T) {
	ex := &fakeExchanger{}
	release := make(chan struct{})
	stop := time.AfterFunc(clientResponseTimer+500*time.Millisecond, func() { close(release) })
	t.Cleanup(func() { stop.Stop() })
	ex.set(hangUntil(release, records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.3")))
	cfg := DefaultConfig()
	cfg.AnswerTimeout = clientResponseTimer + 2*time.Second
	r, _ := newResolver(t, cfg, ex, &clock{t: time.Unix(1e9, 0)})
	out := r.ServeSlow(context.Background(), buf(), pack(t, "slow.example.", dns.TypeA, nil), server.UDP)
	if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("answer %v, want the backend's after it waited", m)
	}
}

// TestMissAnsweredAtAnswerTimeout: misses of one name whose backend
// exchange hangs, with nothing stale to serve, are each answered SERVFAIL
// at the answer timeout, which is not cached; the one exchange goes on,
// and its answer, when it comes, is cached for the next query.
func TestMissAnsweredAtAnswerTimeout(t *testing.T) {
	ex := &fakeExchanger{}
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ex.set(hangUntil(release, records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.4")))
	cfg := DefaultConfig()
	cfg.AnswerTimeout = 300 * time.Millisecond
	r, set := newResolver(t, cfg, ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "hung.example.", dns.TypeA, nil)
	const n = 3
	type result struct {
		out  []byte
		took time.Duration
	}
	res := make(chan result, n)
	for range n {
		go func() {
			start := time.Now()
			out := r.ServeSlow(context.Background(), buf(), req, server.UDP)
			res <- result{out, time.Since(start)}
		}()
	}
	for range n {
		var got result
		select {
		case got = <-res:
		case <-time.After(5 * time.Second):
			t.Fatal("a miss was not answered within 5s")
		}
		if m := unpack(t, got.out); m.Rcode != dns.RcodeServerFailure {
			t.Errorf("answer %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
		}
		if got.took < cfg.AnswerTimeout-50*time.Millisecond || got.took > cfg.AnswerTimeout+time.Second {
			t.Errorf("answered after %v, want the answer timeout (%v)", got.took, cfg.AnswerTimeout)
		}
	}
	if got := metricstest.Value(t, set, "nodedns_upstream_errors_total"); got != n {
		t.Errorf("nodedns_upstream_errors_total = %v, want %d (each miss left without the backend's answer)", got, n)
	}
	if _, hit := r.ServeFast(buf(), req, server.UDP); hit {
		t.Error("the SERVFAIL of the answer timeout was cached")
	}

	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if out, hit := r.ServeFast(buf(), req, server.UDP); hit {
			if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Errorf("cached %v, want the backend's late answer", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late answer never reached the cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := ex.ncalls(); c != 1 {
		t.Errorf("%d exchanges, want 1 shared by the %d misses", c, n)
	}
}

// TestStaleAtAnswerTimeout: an answer timeout shorter than the client
// response timer serves an expired entry stale at the answer timeout.
func TestStaleAtAnswerTimeout(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	cfg := DefaultConfig()
	cfg.Cache.ServeStale = 10 * time.Minute
	cfg.AnswerTimeout = 300 * time.Millisecond
	r, _ := newResolver(t, cfg, ex, clk)
	req := pack(t, "stale-early.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)

	clk.Advance(61 * time.Second)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ex.set(hangUntil(release, records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.2")))
	start := time.Now()
	out, _ := serve(t, r, req, server.UDP)
	took := time.Since(start)
	if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer %v, want the stale 192.0.2.1", m)
	}
	if took < 250*time.Millisecond || took > clientResponseTimer-300*time.Millisecond {
		t.Errorf("answered after %v, want the answer timeout (%v), before the client response timer", took, cfg.AnswerTimeout)
	}
}
