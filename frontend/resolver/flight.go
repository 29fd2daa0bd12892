package resolver

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/cache"
)

// flight is one backend exchange for a cache key (dnswire.Query.Key), which
// every miss and prefetch of that key waits for while it runs, and the one
// cache entry built from its answer. However many pods ask a name at once,
// its answer is fetched, checked, packed and stored once, and each of them
// gets a copy of the same entry written for its own query (ID, case, EDNS,
// size limit) by cache.Write.
type flight struct {
	key []byte // the cache key, owned by the flight
	// client is the pod whose miss started the flight, told to the
	// backend (fetch); invalid for a prefetch or without PassClient.
	client netip.Addr
	done   chan struct{} // closed once resp and err are set (and e, for an answer to store)

	// Set before done is closed, read-only after.
	resp *dns.Msg // the backend's answer, shared: read-only; nil when err is set
	err  error    // fetch's error: the pool's, or the answer's mismatch

	once   sync.Once
	e      *cache.Entry // built from resp by the first entry call
	setErr error        // cache.Set's error, with e nil

	mu        sync.Mutex
	finished  bool // the result is set; guarded by mu
	abandoned int  // callers that stopped waiting, whose failure the flight counts; guarded by mu
}

// entry returns the cache entry built from the flight's answer, building
// and storing it on the first call (cache.Set). done must be closed and
// resp set.
func (f *flight) entry(c *cache.Cache) (*cache.Entry, error) {
	f.once.Do(func() {
		f.setErr = errNoEntry // stays if Set panics
		f.e, f.setErr = c.Set(f.key, f.resp)
	})
	return f.e, f.setErr
}

// errNoEntry: building the entry failed without an error (a panic, which
// the server recovers from).
var errNoEntry = errors.New("no cache entry built for the answer")

// errNoFlight: the exchange ended without a result (a panic, which the
// server recovers from); its waiters answer SERVFAIL or stale data.
var errNoFlight = errors.New("exchange ended without a result")

// join returns the flight for key, starting one when none is running.
//
// A new flight runs in a goroutine on the resolver's own context, so that
// its answer fills the cache after its callers have stopped waiting: a
// pod's miss stops at the client response timer (RFC 8767 section 5) or
// at Config.AnswerTimeout, a prefetch at its own timeout. That goroutine
// costs a miss about two goroutine switches
// (BenchmarkCoalescedMisses/n=1), against an exchange with the backend.
// After Close every flight runs in the caller, on ctx.
//
// With search set (a pod's miss), a new flight also starts the search-path
// prefetch of key (searchPrefetch); a miss that joins a running flight,
// such as a pod's next try joining the prefetch of it, starts nothing.
//
// client, when valid, is passed to the backend by a new flight (fetch).
func (r *Resolver) join(ctx context.Context, key []byte, search bool, client netip.Addr) *flight {
	r.mu.Lock()
	if f := r.flights[string(key)]; f != nil {
		r.mu.Unlock()
		r.shared()
		return f
	}
	f := newFlight(key)
	f.client = client
	if r.closed {
		r.mu.Unlock()
		r.fly(ctx, f)
		return f
	}
	r.flights[string(f.key)] = f
	r.detach(f, 0)
	if search {
		r.searchPrefetch(key, f)
	}
	return f
}

// newFlight returns a flight for key, which it copies.
func newFlight(key []byte) *flight {
	return &flight{key: bytes.Clone(key), done: make(chan struct{})}
}

// fly runs f's exchange. An answer other than SERVFAIL is stored at once,
// before anyone reads it, so that the next miss of the key is a hit. A
// SERVFAIL is stored only by a caller with nothing stale to serve instead
// (ServeSlow). A failure after a caller served stale instead of waiting
// marks the refresh failed, so that the entry goes on being served stale
// for cache.RecheckInterval rather than each client waiting out the timer.
func (r *Resolver) fly(ctx context.Context, f *flight) {
	f.err = errNoFlight
	defer r.land(f) // even after a panic: a flight left in the map would hang every later miss of its key
	f.resp, f.err = r.fetch(ctx, f.key, f.client)
	if f.err == nil && f.resp.Rcode != dns.RcodeServerFailure {
		f.entry(r.cache)
	}
}

// land ends f: a later miss of its key starts a new flight, and f's
// waiters get its result.
func (r *Resolver) land(f *flight) {
	r.mu.Lock()
	if r.flights[string(f.key)] == f {
		delete(r.flights, string(f.key))
	}
	r.mu.Unlock()
	f.mu.Lock()
	f.finished = true
	abandoned := f.abandoned
	f.mu.Unlock()
	close(f.done)

	if abandoned == 0 {
		return
	}
	err := f.err
	switch {
	case err != nil:
		r.countFetchError(err, abandoned)
	case f.resp.Rcode == dns.RcodeServerFailure:
		err = errServfail
	default:
		err = f.setErr
	}
	if backendFailed(r.ctx, err) {
		r.log.Debug("background refresh after serving stale failed", zap.Error(err))
		r.cache.RefreshFailed(f.key)
	}
}

// await waits for f's result, for at most d when d > 0 (then it returns
// timerErr: errClientTimer or errAnswerTimeout) and until ctx ends
// (ctx.Err()). A caller that leaves early with abandon set leaves f to
// count its failure and to mark the refresh failed (fly). Each caller's failure is counted once, in
// nodedns_upstream_mismatch_total or nodedns_upstream_errors_total.
func (r *Resolver) await(ctx context.Context, f *flight, d time.Duration, timerErr error, abandon bool) (*dns.Msg, error) {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	var err error
	select {
	case <-f.done:
		r.countFetchError(f.err, 1)
		return f.resp, f.err
	case <-timer:
		err = timerErr
	case <-ctx.Done():
		err = ctx.Err()
	}
	f.mu.Lock()
	if f.finished { // the result came as the wait ended: take it
		f.mu.Unlock()
		<-f.done
		r.countFetchError(f.err, 1)
		return f.resp, f.err
	}
	if abandon {
		f.abandoned++
	}
	f.mu.Unlock()
	if !abandon {
		r.m.upErrors.Inc() // the caller is left without an answer
	}
	return nil, err
}

// countFetchError counts n callers left without an answer by err.
func (r *Resolver) countFetchError(err error, n int) {
	switch {
	case err == nil:
	case errors.Is(err, errMismatch):
		r.m.mismatch.Add(n)
	default:
		r.m.upErrors.Add(n)
	}
}
