package upstream

import (
	"sync"
	"time"
)

// health tracks the consecutive failures of one address and, once it is
// marked down, when one query may try it again. A down address is skipped
// so that a dead backend does not add a timeout to every miss; after the
// backoff a single query (the trial) goes to it, and its result either
// brings the address back or doubles the wait, up to the maximum.
type health struct {
	threshold  int
	backoffMin time.Duration
	backoffMax time.Duration

	mu        sync.Mutex
	fails     int           // consecutive failed attempts; guarded by mu
	down      bool          // skipped until retryAt; guarded by mu
	retryAt   time.Time     // when down, the earliest trial; guarded by mu
	backoff   time.Duration // the wait after the next failed trial; guarded by mu
	trial     bool          // a trial is running; guarded by mu
	lastOK    time.Time     // end of the most recent success; guarded by mu
	lastErr   error         // most recent failure, nil until one; guarded by mu
	lastErrAt time.Time     // guarded by mu
}

// admit reports whether an attempt may go to the address at now. Of the
// callers that arrive after retryAt, only the first is admitted (the trial)
// until it reports its result.
func (h *health) admit(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return true
	}
	if h.trial || now.Before(h.retryAt) {
		return false
	}
	h.trial = true
	return true
}

// success records a good exchange ending at now and reports whether the
// address was down.
func (h *health) success(now time.Time) (wasDown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wasDown = h.down
	h.lastOK = now
	h.fails, h.down, h.trial, h.backoff = 0, false, false, 0
	return wasDown
}

// failure records an attempt that started at start and failed at now, and
// reports whether it marked the address down (a failed trial keeps it down
// and reports false).
//
// A timeout does not count against an address that answered another query
// while this one waited: the address is alive, and the slowness belongs to
// the name (the backend forwarding it to a slow resolver), which a healthy
// backend must not be marked down for.
func (h *health) failure(start, now time.Time, err error) (wentDown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr, h.lastErrAt = err, now
	if !h.down && Reason(err) == ReasonTimeout && h.lastOK.After(start) {
		return false
	}
	h.fails++
	if h.down {
		// A failed trial: wait longer before the next one.
		h.trial = false
		h.retryAt = now.Add(h.backoff)
		h.backoff = min(2*h.backoff, h.backoffMax)
		return false
	}
	if h.fails < h.threshold {
		return false
	}
	h.down = true
	h.retryAt = now.Add(h.backoffMin)
	h.backoff = min(2*h.backoffMin, h.backoffMax)
	return true
}

// probed records that an outside probe found the address answering at now:
// if it is down, the next exchange tries it at once instead of after the
// backoff, and a failure of that try starts the backoff over from the
// minimum.
func (h *health) probed(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down && !h.trial {
		h.retryAt = now
		h.backoff = min(2*h.backoffMin, h.backoffMax)
	}
}

// healthSnapshot is a copy of the state for Status.
type healthSnapshot struct {
	down      bool
	fails     int
	retryAt   time.Time
	lastErr   error
	lastErrAt time.Time
}

func (h *health) snapshot() healthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return healthSnapshot{h.down, h.fails, h.retryAt, h.lastErr, h.lastErrAt}
}
