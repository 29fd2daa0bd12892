package resolver

import (
	"bytes"
	"context"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// prefetch refreshes the entry for key in the background. The cache hands
// the task to one caller per entry at a time (cache.Result.Prefetch). A
// failed refresh, or a SERVFAIL, leaves the entry as it is: it expires and
// may then be served stale.
func (r *Resolver) prefetch(k []byte) {
	key := bytes.Clone(k)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	r.m.prefetch.Inc()
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, prefetchTimeout)
		defer cancel()
		resp, err := r.fetch(ctx, key)
		if err == nil && resp.Rcode != dns.RcodeServerFailure {
			_, err = r.cache.Set(key, resp)
		}
		if err != nil || resp.Rcode == dns.RcodeServerFailure {
			r.log.Debug("prefetch failed", zap.Error(err))
			r.cache.PrefetchDone(key)
		}
	}()
}
