package resolver

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// clientResponseTimer is how long a miss with an expired answer in the
// cache waits for the backend before that answer is served stale: RFC 8767
// section 5 suggests 1.8 seconds for this client response timer, so that
// a stub resolver gets an answer before its own timeout and retry. The
// backend's exchange goes on and refreshes the cache when it answers.
// Serving stale marks the refresh failed (cache.RefreshFailed), so that
// the next clients get the stale answer from the cache at once rather than
// each waiting out the timer again, until the refresh lands and replaces
// the entry. A miss with nothing to serve instead waits for the backend as
// long as the upstream pool allows.
const clientResponseTimer = 1800 * time.Millisecond

// errClientTimer: the client response timer ran out before the backend
// answered; the exchange continues in the background.
var errClientTimer = errors.New("no answer within the client response timer (RFC 8767 section 5)")

// fetchWithin is fetch bounded by the client response timer d: past d it
// returns errClientTimer, and the exchange, which keeps running on the
// resolver's own context, stores its answer in the cache when it comes
// (or marks the refresh failed, so that the entry is served stale for the
// recheck interval). After Close it is fetch.
func (r *Resolver) fetchWithin(ctx context.Context, key []byte, d time.Duration) (*dns.Msg, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return r.fetch(ctx, key)
	}
	r.wg.Add(1)
	r.mu.Unlock()

	type result struct {
		resp *dns.Msg
		err  error
	}
	done := make(chan result)        // the answer, while the caller waits
	abandoned := make(chan struct{}) // closed when the caller stops waiting
	key = bytes.Clone(key)           // the caller's buffer is reused after it returns
	go func() {
		defer r.wg.Done()
		resp, err := r.fetch(r.ctx, key)
		select {
		case done <- result{resp, err}:
			return
		case <-abandoned:
		}
		if err == nil && resp.Rcode != dns.RcodeServerFailure {
			if _, err = r.cache.Set(key, resp); err == nil {
				return
			}
		}
		if r.ctx.Err() == nil { // our own shutdown is no backend failure
			r.log.Debug("background refresh after serving stale failed", zap.Error(err))
			r.cache.RefreshFailed(key)
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case res := <-done:
		return res.resp, res.err
	case <-t.C:
		close(abandoned)
		return nil, errClientTimer
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	}
}
