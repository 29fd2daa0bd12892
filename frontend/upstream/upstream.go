// Package upstream sends the frontend's cache misses to the local backend
// over persistent TCP connections and, when the backend fails or is down,
// to fallback addresses (other nodes' backends behind a Service).
//
// Identical concurrent queries share one exchange; concurrent exchanges are
// bounded; each address has its own connection pool, and its own prober
// that decides its health out of band: failed queries never mark an
// address down, failed probes do.
package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/clientopt"
)

// Pool exchanges queries with the backend and the fallbacks.
type Pool struct {
	cfg   Config
	log   *zap.Logger
	m     *poolMetrics
	addrs []*address // backend first, then fallbacks in order; never empty
	now   func() time.Time

	// ctx bounds every exchange; Close cancels it. Exchanges run detached
	// from their callers' contexts because other callers may be waiting
	// for the same answer.
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{} // closed by Close; ends the janitor and the probers
	wg     sync.WaitGroup

	mu      sync.Mutex
	flights map[flightKey]*flight // exchanges in progress by key, at most MaxInflight; guarded by mu
	closed  bool                  // guarded by mu
	using   *address              // answered the last exchange, nil before one; guarded by mu
}

// flight is one upstream exchange that any number of callers wait for.
type flight struct {
	done chan struct{} // closed once msg and err are set
	msg  *dns.Msg      // shared by every waiter: read-only
	err  error
}

// flightKey identifies queries that can share an answer: the lowercased
// name (RFC 4343), type, class, and the DO and CD bits, which change what
// the backend answers (RFC 3225, RFC 4035 section 3.2.2).
type flightKey struct {
	name   string
	qtype  uint16
	qclass uint16
	do, cd bool
}

// New returns a Pool for cfg, creating its series in set. It fails if set
// already holds them.
func New(cfg Config, log *zap.Logger, set *vm.Set) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("upstream config: %w", err)
	}
	cfg = cfg.withDefaults()
	p := &Pool{
		cfg:     cfg,
		log:     log.Named("upstream"),
		now:     time.Now,
		stop:    make(chan struct{}),
		flights: make(map[flightKey]*flight),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for i, a := range append([]string{cfg.Backend}, cfg.Fallbacks...) {
		kind := kindBackend
		if i > 0 {
			kind = kindFallback
		}
		p.addrs = append(p.addrs, &address{
			addr: a, kind: kind, timeout: cfg.Timeout, idleFor: cfg.IdleTimeout, maxIdle: cfg.MaxIdleConns,
			health: health{threshold: cfg.FailThreshold, interval: cfg.ProbeInterval, backoffMax: cfg.BackoffMax,
				kick: make(chan struct{}, 1)},
		})
	}
	m, err := newMetrics(set, p.addrs)
	if err != nil {
		p.cancel()
		return nil, fmt.Errorf("upstream metrics: %w", err)
	}
	p.m = m
	for _, a := range p.addrs {
		a.m = m
	}
	p.wg.Add(1 + len(p.addrs))
	go p.janitor()
	for _, a := range p.addrs {
		go p.probeLoop(a)
	}
	return p, nil
}

// Exchange resolves m upstream and returns the response. m must have one
// question and must not change during the call; Exchange does not modify it.
//
// The response may be shared with other callers that asked the same
// question at the same time: it is read-only. Its ID is the upstream
// exchange's, not m's; the caller sets its own when it writes the answer.
//
// Errors: ErrOverloaded at once when MaxInflight exchanges are running;
// otherwise the *Error of each failed attempt, joined; ctx.Err() when ctx
// ends first.
func (p *Pool) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	if len(m.Question) != 1 {
		return nil, ErrBadQuery
	}
	q := m.Question[0]
	key := flightKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass, cd: m.CheckingDisabled}
	if opt := m.IsEdns0(); opt != nil {
		key.do = opt.Do()
	}

	p.mu.Lock()
	f, shared := p.flights[key]
	if !shared {
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if len(p.flights) >= p.cfg.MaxInflight {
			p.mu.Unlock()
			p.first().km.overloaded.Inc()
			return nil, ErrOverloaded
		}
		f = &flight{done: make(chan struct{})}
		p.flights[key] = f
		p.wg.Add(1)
	}
	p.mu.Unlock()

	if shared {
		p.m.coalesced.Inc()
	} else {
		wire, err := pack(m)
		// The client's address (shared/clientopt) is for the backend
		// only: a fallback (another node's backend, kube-dns) would
		// forward it to servers outside the cluster.
		plain := wire
		if err == nil && clientopt.Has(m) {
			plain, err = pack(clientopt.Without(m))
		}
		if err != nil {
			p.finish(key, f, nil, fmt.Errorf("pack query: %w", err))
		} else {
			go func() { r, err := p.resolve(wire, plain, q); p.finish(key, f, r, err) }()
		}
	}
	select {
	case <-f.done:
		return f.msg, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CountCoalesced counts in nodedns_upstream_coalesced_total a query that
// shared an exchange before it reached the pool: the resolver coalesces the
// misses of one cache key itself, so that their answer is also stored once
// (resolver.Coalescer).
func (p *Pool) CountCoalesced() { p.m.coalesced.Inc() }

// pack returns m in wire format behind a 2-byte length prefix.
func pack(m *dns.Msg) ([]byte, error) {
	if m.IsEdns0() != nil {
		// Pack writes the extended RCODE into the OPT record: pack a copy.
		c := *m
		c.Extra = slices.Clone(m.Extra)
		for i, rr := range c.Extra {
			if opt, ok := rr.(*dns.OPT); ok {
				o := *opt
				c.Extra[i] = &o
			}
		}
		m = &c
	}
	b, err := m.Pack()
	if err != nil {
		return nil, err
	}
	wire := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(wire, uint16(len(b)))
	copy(wire[2:], b)
	return wire, nil
}

func (p *Pool) finish(key flightKey, f *flight, r *dns.Msg, err error) {
	f.msg, f.err = r, err
	p.mu.Lock()
	delete(p.flights, key)
	p.mu.Unlock()
	close(f.done)
	p.wg.Done()
}

// resolve tries the addresses in order, skipping those marked down, and
// all of them in order when every one is down: the probes may be wrong
// (CoreDNS's forward does the same when its health checks fail everywhere),
// and trying costs a refused dial at worst. A failed attempt moves the
// query on to the next address but leaves the address's health alone (see
// health): a refused dial tells of this moment and a timeout of this name,
// while the probe, a question the backend answers from memory, tells of
// the address.
//
// wire goes to the backend, plain (wire without the client's address) to
// the fallbacks.
func (p *Pool) resolve(wire, plain []byte, q dns.Question) (*dns.Msg, error) {
	var errs []error
	allDown := true
	for _, a := range p.addrs {
		if !a.health.isDown() {
			allDown = false
			break
		}
	}
	for i, a := range p.addrs {
		down := a.health.isDown()
		if down && !allDown {
			continue
		}
		start := p.now()
		w := wire
		if a.kind == kindFallback {
			w = plain
		}
		// A fresh ID per attempt: the wire ID is ours, not the caller's.
		id := uint16(rand.Uint32())
		binary.BigEndian.PutUint16(w[2:], id)
		r, err := a.exchange(p.ctx, start, w, id, q)
		end := p.now()
		a.km.duration.Update(end.Sub(start).Seconds())
		if err == nil {
			a.km.ok.Inc()
			if down {
				// Alive after all: let its probe say so at once.
				a.health.kickProbe()
			}
			if i > 0 {
				p.m.fallback.Inc()
			}
			p.mu.Lock()
			p.using = a
			p.mu.Unlock()
			return r, nil
		}
		err = &Error{Upstream: a.kind, Addr: a.addr, Err: err}
		errs = append(errs, err)
		if p.ctx.Err() != nil {
			return nil, errors.Join(ErrClosed, err)
		}
		if Reason(err) == ReasonTimeout {
			a.km.timeout.Inc()
		} else {
			a.km.err.Inc()
		}
		a.health.queryFailed(end, err)
	}
	return nil, errors.Join(errs...)
}

// ProbeBackend makes the backend's prober probe it now instead of at its
// next turn. The gate calls it each time its own checks see the backend
// change state (gate.Config.OnChange), so that a backend back from a
// restart is in use again as soon as the gate finds it ready, however long
// its probe backoff had grown, and one that stopped is probed at once.
// The pool's own probe still decides.
func (p *Pool) ProbeBackend() { p.addrs[0].health.kickProbe() }

// first returns the address an exchange would try first now.
func (p *Pool) first() *address {
	for _, a := range p.addrs {
		if !a.health.isDown() {
			return a
		}
	}
	return p.addrs[0]
}

// janitor closes idle connections as they expire, so that they do not
// linger half-closed after the backend's own idle timeout.
func (p *Pool) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.cfg.IdleTimeout/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			now := p.now()
			for _, a := range p.addrs {
				a.expire(now)
			}
		case <-p.stop:
			return
		}
	}
}

// Close stops the pool: running exchanges fail with ErrClosed, connections
// are closed, and later Exchange calls return ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	close(p.stop)
	p.wg.Wait()
	for _, a := range p.addrs {
		a.drain(true)
	}
	return nil
}
