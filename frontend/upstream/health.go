package upstream

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// health is what the probes of one address have found. Only probes change
// whether the address is down: a query that times out or fails tells of
// that query's name as much as of the address (a backend forwarding a
// slow external name is alive), so queries only record their last error
// for diagnostics. This is how CoreDNS's forward plugin decides too: its
// health check marks an upstream down, a failed query only asks for one.
//
// An address goes down after threshold consecutive failed probes and comes
// back with the first probe it answers. While it is down it is probed
// after a backoff that starts at the probe interval and doubles with each
// failed probe, up to backoffMax; nothing but a failed probe grows it.
type health struct {
	threshold  int
	interval   time.Duration
	backoffMax time.Duration

	down atomic.Bool   // skipped by queries; written under mu, read without it
	kick chan struct{} // capacity 1: a probe asked for before its turn

	mu        sync.Mutex
	fails     int           // consecutive failed probes; guarded by mu
	backoff   time.Duration // while down, the wait before the next probe; guarded by mu
	nextProbe time.Time     // while down, when the next probe is due; guarded by mu
	lastErr   error         // most recent failure, probe or query, nil until one; guarded by mu
	lastErrAt time.Time     // guarded by mu
}

// isDown reports whether the address is marked down.
func (h *health) isDown() bool { return h.down.Load() }

// probed records the result of a probe ending at now: err is nil when the
// address answered it. It reports whether the address went down or came
// back, and how long to wait before the next probe.
func (h *health) probed(now time.Time, err error) (wentDown, cameUp bool, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	down := h.down.Load()
	if err == nil {
		h.fails, h.backoff, h.nextProbe = 0, 0, time.Time{}
		h.down.Store(false)
		return false, down, h.interval
	}
	h.lastErr, h.lastErrAt = err, now
	h.fails++
	switch {
	case down:
		h.backoff = min(2*h.backoff, h.backoffMax)
	case h.fails >= h.threshold:
		h.down.Store(true)
		wentDown = true
		h.backoff = h.interval
	default:
		return false, false, h.interval
	}
	h.nextProbe = now.Add(h.backoff)
	return wentDown, false, h.backoff
}

// queryFailed records the error of a query for Status. It does not change
// the address's health (see health).
func (h *health) queryFailed(now time.Time, err error) {
	h.mu.Lock()
	h.lastErr, h.lastErrAt = err, now
	h.mu.Unlock()
}

// healthSnapshot is a copy of the state for Status.
type healthSnapshot struct {
	down      bool
	fails     int
	nextProbe time.Time
	lastErr   error
	lastErrAt time.Time
}

func (h *health) snapshot() healthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return healthSnapshot{h.down.Load(), h.fails, h.nextProbe, h.lastErr, h.lastErrAt}
}

// The probe question: the SOA of in-addr.arpa. The backend's kubernetes
// plugin holds that zone (the default Corefile and the chart list it beside
// the cluster domain) and answers its SOA from memory, without going
// upstream and without knowing the cluster domain, so the probe tells of
// the backend and never of a slow external resolver. A fallback is another
// node's fallback listener, which relays into that node's same chain: the
// same question probes it end to end. The plugin builds that SOA in memory
// (CoreDNS plugin/backend_lookup.go, SOA), so an API server outage does not
// fail the probe either.
const probeName = "in-addr.arpa."

var probeQuestion = dns.Question{Name: probeName, Qtype: dns.TypeSOA, Qclass: dns.ClassINET}

// probeWire returns the probe query with its length prefix, RD set as on
// the frontend's misses; its ID is set per probe.
func probeWire() []byte {
	m := new(dns.Msg)
	m.RecursionDesired = true
	m.Question = []dns.Question{probeQuestion}
	wire, err := pack(m)
	if err != nil {
		panic(fmt.Sprintf("pack the probe query: %v", err)) // a constant message
	}
	return wire
}

// probeLoop probes a, on the pool's connections to it, every ProbeInterval
// while it is up and after its backoff while it is down, until the pool
// closes; kickProbe makes it probe at once.
func (p *Pool) probeLoop(a *address) {
	defer p.wg.Done()
	wire := probeWire() // this goroutine's own: the ID is written into it
	t := time.NewTimer(p.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-a.health.kick:
			t.Stop()
		case <-t.C:
		}
		err := p.probe(a, wire)
		if p.ctx.Err() != nil {
			return
		}
		wentDown, cameUp, wait := a.health.probed(p.now(), err)
		a.km.probed(err)
		switch {
		case wentDown:
			a.flush()
			a.healthy.Set(0)
			p.log.Warn("upstream marked down: its probes failed", zap.String("upstream", a.kind), zap.String("address", a.addr),
				zap.Int("failed_probes", p.cfg.FailThreshold), zap.String("reason", Reason(err)), zap.Error(err))
		case cameUp:
			a.healthy.Set(1)
			p.log.Info("upstream answers its probe again", zap.String("upstream", a.kind), zap.String("address", a.addr))
		}
		t.Reset(wait)
	}
}

// probe asks a the probe question within ProbeTimeout. Only a NOERROR
// answer passes: a fallback relay whose own backend is gone answers
// SERVFAIL, and one that refuses this node answers REFUSED, and neither
// can answer a miss.
func (p *Pool) probe(a *address, wire []byte) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.ProbeTimeout)
	defer cancel()
	id := uint16(rand.Uint32())
	binary.BigEndian.PutUint16(wire[2:], id)
	r, err := a.exchange(ctx, p.now(), wire, id, probeQuestion)
	if err != nil {
		return err
	}
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("%w: %s", ErrProbeRcode, dns.RcodeToString[r.Rcode])
	}
	return nil
}

// kickProbe makes the address's prober probe it now rather than at its
// next turn; a probe already asked for makes it a no-op.
func (h *health) kickProbe() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}
