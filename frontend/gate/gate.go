// Package gate tells whether the local backend is ready to answer, so that
// the frontend takes over the node's DNS only when something answers behind
// it, and reports when the backend goes down and fallbacks take over.
//
// The backend is ready when its HTTP readiness URL returns 200 (CoreDNS's
// ready plugin: every plugin, the kubernetes one included, has synced) and
// it answers a DNS query over TCP.
package gate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/upstream"
)

// Gate probes the backend on an interval and holds the latest verdict.
type Gate struct {
	cfg      Config
	log      *zap.Logger
	m        *gateMetrics
	readyURL *url.URL   // cfg.ReadyURL parsed; nil without an HTTP probe
	dialTo   string     // host:port of readyURL, the port defaulted to 80
	dialer   net.Dialer // for the HTTP probe

	readyOnce sync.Once
	readyCh   chan struct{} // closed the first time the backend is ready

	mu     sync.Mutex
	probed bool   // a verdict has been stored; guarded by mu
	ready  bool   // guarded by mu
	detail string // always set; guarded by mu
}

// New returns a Gate for cfg, creating its series in set. It fails if cfg
// is invalid (an https ReadyURL included) or set already holds the series.
// It probes nothing until Run.
func New(cfg Config, log *zap.Logger, set *vm.Set) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gate config: %w", err)
	}
	cfg = cfg.withDefaults()
	g := &Gate{
		cfg:     cfg,
		log:     log.Named("gate"),
		readyCh: make(chan struct{}),
		detail:  fmt.Sprintf("backend %s: not probed yet", cfg.Backend),
	}
	if cfg.ReadyURL != "" {
		u, err := ParseReadyURL(cfg.ReadyURL) // cannot fail: Validate parsed it
		if err != nil {
			return nil, fmt.Errorf("gate config: %w", err)
		}
		g.readyURL, g.dialTo = u, readyAddr(u)
	}
	m, err := newMetrics(set)
	if err != nil {
		return nil, fmt.Errorf("gate metrics: %w", err)
	}
	g.m = m
	return g, nil
}

// Run probes the backend at once and then every Interval until ctx ends.
func (g *Gate) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		ready, detail := g.Check(ctx)
		if ctx.Err() != nil {
			return nil
		}
		g.set(ready, detail)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check runs both probes once, concurrently, counts their failures, and
// returns the verdict without storing it; diagnose uses it directly.
func (g *Gate) Check(ctx context.Context) (ready bool, detail string) {
	var httpErr error
	var wg sync.WaitGroup
	if g.readyURL != nil {
		wg.Go(func() { httpErr = g.probeHTTP(ctx) })
	}
	rcode, dnsErr := g.probeDNS(ctx)
	wg.Wait()

	var problems []string
	if dnsErr != nil {
		g.m.failure(probeDNS, upstream.Reason(dnsErr))
		problems = append(problems, fmt.Sprintf("backend %s: %s", g.cfg.Backend, describe(dnsErr)))
	}
	if httpErr != nil {
		reason := upstream.Reason(httpErr)
		if errors.Is(httpErr, errStatus) {
			reason = reasonStatus
		}
		g.m.failure(probeHTTP, reason)
		problems = append(problems, fmt.Sprintf("backend ready url %s: %s", g.cfg.ReadyURL, describe(httpErr)))
	}
	if len(problems) > 0 {
		return false, strings.Join(problems, "; ")
	}
	return true, fmt.Sprintf("backend %s ready (%s %s: %s)", g.cfg.Backend,
		dns.Fqdn(g.cfg.ProbeName), dns.Type(g.cfg.ProbeType), dns.RcodeToString[rcode])
}

// describe shortens err to its cause as an operator reads it: "connection
// refused", "i/o timeout", or the whole error for anything else.
func describe(err error) string {
	switch upstream.Reason(err) {
	case upstream.ReasonRefused:
		return "connection refused"
	case upstream.ReasonTimeout:
		return "i/o timeout"
	case upstream.ReasonReset:
		return "connection reset"
	case upstream.ReasonEOF:
		return "connection closed"
	}
	return err.Error()
}

func (g *Gate) set(ready bool, detail string) {
	g.mu.Lock()
	changed := !g.probed || ready != g.ready
	g.probed, g.ready, g.detail = true, ready, detail
	g.mu.Unlock()
	if ready {
		g.readyOnce.Do(func() { close(g.readyCh) })
	}
	if !changed {
		return
	}
	if ready {
		g.m.ready.Set(1)
		g.log.Info("backend ready", zap.String("detail", detail))
	} else {
		g.m.ready.Set(0)
		g.log.Warn("backend not ready", zap.String("detail", detail))
	}
	if g.cfg.OnChange != nil {
		g.cfg.OnChange(ready, detail)
	}
}

// Ready returns the latest verdict and its detail, such as
// "backend 127.0.0.1:5300: connection refused". It has the signature of
// shared/health.Checker.
func (g *Gate) Ready() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ready, g.detail
}

// Wait blocks until the backend has been ready once, or ctx ends.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.readyCh:
		return nil
	case <-ctx.Done():
		_, detail := g.Ready()
		return fmt.Errorf("wait for backend: %w (last: %s)", ctx.Err(), detail)
	}
}
