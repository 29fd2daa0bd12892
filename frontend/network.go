package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/gate"
	"github.com/nodedns/nodedns/frontend/nodenet"
)

// network is the node networking the frontend owns: the interface holding
// the local IPs and the rules that steer pods' queries to them.
type network interface {
	// Setup starts taking over the node's DNS in the background: once the
	// backend is ready it installs the interface and rules and keeps them
	// reconciled until Teardown or Leave. It returns at once.
	Setup(ctx context.Context) error
	// Status reports whether the takeover is done, with a detail for /ready.
	Status() (ok bool, detail string)
	// Teardown stops reconciling, calls drain (which stops reading and
	// answers what was read) and, unless another instance runs on the node,
	// removes the rules, then the interface. As the last instance it first
	// removes the rules that divert pods' queries here, so that none
	// arrives once reading stops: queries sent meanwhile either reached the
	// sockets and are answered, or take kube-proxy's path (for the local
	// IPs through the release table, which stays: nodenet/releasetable.go).
	Teardown(ctx context.Context, drain func()) error
	// Leave stops reconciling and leaves the interface and rules to the
	// instance that took the sockets over.
	Leave()
}

// backendGate is the part of gate.Gate the takeover waits on.
type backendGate interface {
	Wait(ctx context.Context) error
	Ready() (bool, string)
}

// presenceLock is the lock file in the handover directory through which
// instances on one node learn whether another one is running.
const presenceLock = "network.lock"

// startNetwork starts the backend gate (with --setup-network only: it
// decides when the node's DNS is taken over) and returns the node
// networking, not yet set up. The gate runs until ctx ends and tells pool
// of each change it sees.
func startNetwork(ctx context.Context, cfg config, log *zap.Logger, reg *vm.Set, pool backendProber) (network, *gate.Gate, error) {
	if !cfg.setupNetwork {
		return noNetwork{}, nil, nil
	}
	g, err := gate.New(gateConfig(cfg, pool), log.Named("gate"), reg)
	if err != nil {
		return nil, nil, err
	}
	go func() { _ = g.Run(ctx) }()
	nw, err := newNetwork(ctx, cfg, log, reg, g)
	if err != nil {
		return nil, nil, err
	}
	return nw, g, nil
}

// backendProber is the part of upstream.Pool the gate feeds.
type backendProber interface {
	ProbeBackend()
}

// gateConfig is the gate's configuration for cfg. Each change of the
// gate's verdict makes the pool probe the backend at once: the pool's own
// probes decide the backend's health, since they must work without the
// gate too (--setup-network=false), and the gate's view makes them prompt,
// so a backend back from a restart is used again as soon as the gate finds
// it ready, however long the pool's probe backoff had grown.
func gateConfig(cfg config, pool backendProber) gate.Config {
	return gate.Config{
		Backend:  cfg.backend,
		ReadyURL: cfg.backendReadyURL,
		OnChange: func(bool, string) { pool.ProbeBackend() },
	}
}

// iptablesBackend is --iptables-backend for nodenet: auto is detection.
func iptablesBackend(s string) nodenet.Backend {
	if s == "auto" {
		return ""
	}
	return nodenet.Backend(s)
}

// newNetwork returns the node networking for cfg: nothing at all with
// --setup-network=false.
func newNetwork(ctx context.Context, cfg config, log *zap.Logger, reg *vm.Set, g backendGate) (network, error) {
	if !cfg.setupNetwork {
		return noNetwork{}, nil
	}
	ncfg := nodenet.Config{
		Mode:         nodenet.Mode(cfg.mode),
		IPTables:     iptablesBackend(cfg.iptablesBackend),
		LocalIPs:     cfg.localIPs,
		ServiceIPs:   cfg.serviceIPs,
		Interface:    cfg.iface,
		SyncInterval: cfg.syncInterval,
		DNSPort:      listenPort(cfg.listen),
		HealthPort:   addrPort(cfg.healthAddr),
		Backend:      cfg.backend,
		ReleaseTo:    cfg.releaseToIPs(),
	}
	if ncfg.Mode == nodenet.ModeNodeIP {
		ifs, err := nodenet.DefaultRouteInterfaces()
		if err != nil {
			return nil, fmt.Errorf("node network: %w", err)
		}
		ncfg.ReleaseSkipInterfaces = ifs
		if len(ncfg.ServiceIPs) == 0 {
			log.Warn("node-ip mode without --service-ip: once the nodedns pods are kube-dns's endpoints, pods that name the kube-dns ClusterIP lose the answers kube-proxy sends them from this node's IP (docs/modes.md, node-ip)")
		}
	}
	m, err := nodenet.NewHost(ctx, ncfg, log, reg)
	if err != nil {
		return nil, fmt.Errorf("node network: %w", err)
	}
	t := &takeover{m: m, gate: g, log: log.Named("takeover"), lameduck: cfg.lameduck, done: make(chan struct{})}
	if cfg.handoverDir != "" {
		t.lockPath = filepath.Join(cfg.handoverDir, presenceLock)
	}
	return t, nil
}

// listenPort is the port of the first --listen address (53 by default).
func listenPort(listen []string) int {
	for _, a := range listen {
		if p := addrPort(a); p != 0 {
			return p
		}
	}
	return nodenet.DefaultDNSPort
}

func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// takeover waits for the backend, then owns the node's DNS.
type takeover struct {
	m        *nodenet.Manager
	gate     backendGate
	log      *zap.Logger
	lockPath string // "" without a handover directory: always tear down
	// lameduck is how long the last instance keeps the node's DNS after
	// SIGTERM (--lameduck): pods' queries that leave it take kube-proxy's
	// path, whose conntrack entries keep the endpoint they first got for
	// the flow's lifetime; kube-proxy needs this long to stop giving new
	// flows this pod's endpoints, which go once its backend stops.
	lameduck time.Duration

	cancel   context.CancelFunc // stops the background loop; set by Setup
	done     chan struct{}      // closed when the background loop returns
	mu       sync.Mutex         // guards cancel, started and presence
	presence *nodenet.Presence
	started  bool        // Setup ran
	gated    atomic.Bool // the backend has been ready once
}

func (t *takeover) Setup(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	t.mu.Lock()
	t.cancel, t.started = cancel, true
	t.mu.Unlock()
	go func() {
		defer close(t.done)
		if t.lockPath != "" {
			p, err := nodenet.Join(ctx, t.lockPath)
			if err != nil {
				t.log.Error("presence lock; a stopping instance may remove the rules under this one", zap.Error(err))
			} else {
				t.mu.Lock()
				t.presence = p
				t.mu.Unlock()
			}
		}
		// What a crashed instance with another configuration left would
		// steer queries to addresses this one does not serve: remove it now.
		// What this configuration wants stays in place: it points here, and
		// the listeners are bound.
		_ = t.m.RemoveStale(ctx)
		// DESIGN.md, "Lifecycle rules": never steer the node's queries here
		// before something answers behind the frontend.
		t.log.Info("waiting for the backend before taking over the node's DNS")
		if err := t.gate.Wait(ctx); err != nil {
			return
		}
		t.gated.Store(true)
		t.log.Info("backend ready; taking over the node's DNS", zap.String("mode", string(t.m.Config().Mode)))
		t.m.Run(ctx)
	}()
	return nil
}

func (t *takeover) Status() (bool, string) {
	ok, detail := t.m.Status()
	if ok {
		return true, detail
	}
	if t.m.InstalledOnce() {
		// Later sync errors are counted and logged; the frontend still
		// answers, so it stays ready.
		return true, detail
	}
	if t.gated.Load() {
		return false, detail
	}
	_, gd := t.gate.Ready()
	return false, "waiting for the backend before taking over the node's DNS: " + gd
}

func (t *takeover) stop() {
	t.mu.Lock()
	cancel, started := t.cancel, t.started
	t.mu.Unlock()
	if !started {
		return
	}
	cancel()
	<-t.done
}

func (t *takeover) Leave() {
	t.stop()
	t.mu.Lock()
	p := t.presence
	t.presence = nil
	t.mu.Unlock()
	if p != nil {
		_, release := p.Leave()
		release()
	}
	t.log.Info("left the node's DNS interface and rules to the newer instance")
}

func (t *takeover) Teardown(ctx context.Context, drain func()) error {
	t.stop()
	t.mu.Lock()
	p := t.presence
	t.presence = nil
	t.mu.Unlock()
	if p != nil {
		last, release := p.Leave()
		defer release()
		if !last {
			t.log.Info("another instance serves this node; leaving the interface and rules to it")
			drain()
			return nil
		}
	}
	if t.lameduck > 0 {
		t.log.Info("lameduck: still answering the node's DNS before handing it back", zap.Duration("lameduck", t.lameduck))
		time.Sleep(t.lameduck)
	}
	t.log.Info("sending pods' queries back to kube-proxy's path, then draining")
	rerr := t.m.Release(ctx)
	drain()
	t.log.Info("removing the node's DNS rules, then the interface")
	if rerr != nil {
		t.log.Warn("releasing pods' queries", zap.Error(rerr))
	}
	if err := t.m.Teardown(ctx); err != nil {
		return errors.Join(errors.New("node network teardown"), err)
	}
	return nil
}

// noNetwork is the network of --setup-network=false: it touches nothing.
type noNetwork struct{}

func (noNetwork) Setup(context.Context) error { return nil }
func (noNetwork) Teardown(_ context.Context, drain func()) error {
	drain()
	return nil
}
func (noNetwork) Leave() {}
func (noNetwork) Status() (bool, string) {
	return true, "node network not managed (--setup-network=false)"
}
