package resolver

import (
	"bytes"
	"context"
	"net/netip"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// prefetch refreshes the entry for key in the background. The cache hands
// the task to one caller per entry at a time (cache.Result.Prefetch). A
// failed refresh, a SERVFAIL or an unusable answer leaves the entry as it
// is and is recorded as a failed refresh: the entry is not prefetched again
// for cache.RecheckInterval, and once expired it is served stale for the
// rest of that interval (RFC 8767 §5), so that a dead backend costs one
// exchange per entry and interval, not one per hit.
func (r *Resolver) prefetch(k []byte) {
	key := bytes.Clone(k)
	r.background(func() {
		r.m.prefetch.Inc()
		ctx, cancel := context.WithTimeout(r.ctx, prefetchTimeout)
		defer cancel()
		// A miss of the same key at the same time shares the exchange.
		f := r.join(ctx, key, false, netip.Addr{})
		resp, err := r.await(ctx, f, 0, nil, false)
		if err == nil && resp.Rcode == dns.RcodeServerFailure {
			err = errServfail
		}
		if err == nil {
			_, err = f.entry(r.cache)
		}
		switch {
		case err == nil:
		case !backendFailed(r.ctx, err): // our own shutdown or full pool: the next hit may try again
			r.cache.PrefetchDone(key)
		default:
			r.log.Debug("prefetch failed", zap.Error(err))
			r.cache.PrefetchFailed(key)
		}
	})
}

// background runs fn in a goroutine of its own, which Close waits for;
// after Close it runs nothing.
func (r *Resolver) background(fn func()) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		fn()
	}()
}
