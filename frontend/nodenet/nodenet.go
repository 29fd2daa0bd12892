// Package nodenet takes over a node's DNS: it puts the addresses pods send
// queries to on a local interface and installs the iptables rules that keep
// those queries out of conntrack and kube-proxy's DNAT. The desired state is
// data (Rules, Config.OwnedIPs); Sync converges the node to it and Run
// repeats that on a ticker.
package nodenet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
)

// Manager owns the node's DNS interface and rules.
type Manager struct {
	cfg Config // validated; never changed after New
	log *zap.Logger
	nl  Netlink             // may be nil only when !cfg.UsesLink()
	ipt map[Family]IPTables // the families the host supports
	nft NFT                 // nil: the release table is not managed
	met *managerMetrics

	noDummy atomic.Bool // set once the kernel refused a dummy link

	mu     sync.Mutex // serialises Sync and Teardown; guards status
	status string     // outcome of the last Sync or Teardown
	ok     bool       // the last Sync left everything in place
	once   bool       // some Sync has left everything in place
}

// New returns a Manager using the given netlink and iptables (one per
// family that the host supports; fakes in unit tests), with its series in
// set (a private set when nil). cfg is validated.
func New(cfg Config, log *zap.Logger, set *vm.Set, nl Netlink, ipt map[Family]IPTables) (*Manager, error) {
	return NewWithNFT(cfg, log, set, nl, ipt, nil)
}

// NewWithNFT is New that also keeps the release table through nft (needed
// when cfg has ReleaseTo addresses).
func NewWithNFT(cfg Config, log *zap.Logger, set *vm.Set, nl Netlink, ipt map[Family]IPTables, nft NFT) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, ip := range cfg.OwnedIPs() {
		if ipt[familyOf(ip)] == nil {
			return nil, fmt.Errorf("no %s iptables for %v", familyOf(ip), ip)
		}
	}
	if nl == nil && cfg.UsesLink() {
		return nil, errors.New("mode " + string(cfg.Mode) + " with these addresses needs netlink")
	}
	if nft == nil && len(cfg.ReleaseTo) > 0 {
		return nil, errors.New("release addresses need nftables")
	}
	return &Manager{
		cfg: cfg, log: log.Named("nodenet"), nl: nl, ipt: ipt, nft: nft, met: newMetrics(set),
		status: "network not set up yet",
	}, nil
}

// NewHost returns a Manager for the network namespace of the calling
// thread, using the iptables backend (legacy or nft) the host's other rules
// live in.
func NewHost(ctx context.Context, cfg Config, log *zap.Logger, set *vm.Set) (*Manager, error) {
	backend := cfg.IPTables
	switch backend {
	case BackendNFT, BackendLegacy:
		log.Named("nodenet").Info("iptables backend", zap.String("backend", string(backend)), zap.String("chosen_by", "--iptables-backend"))
	case "":
		var stats map[Backend]BackendStats
		backend, stats = DetectBackend(ctx, ExecRunner)
		log.Named("nodenet").Info("iptables backend", zap.String("backend", string(backend)),
			zap.Int("nft_rules", stats[BackendNFT].Rules), zap.Bool("nft_hint", stats[BackendNFT].Hint),
			zap.Int("legacy_rules", stats[BackendLegacy].Rules), zap.Bool("legacy_hint", stats[BackendLegacy].Hint))
		if st := stats[BackendLegacy]; st.Denied {
			// Without CAP_NET_RAW iptables-legacy cannot read the
			// host's tables: a host whose rules live there looks empty.
			log.Named("nodenet").Warn("iptables-legacy-save was denied (iptables-legacy needs CAP_NET_RAW): rules in iptables-legacy are not seen; give the frontend NET_RAW, or set --iptables-backend=nft on nft-only hosts",
				zap.String("backend", string(backend)))
		}
	default:
		return nil, fmt.Errorf("iptables backend %q: want nft, legacy or empty (detect)", backend)
	}
	ipt := map[Family]IPTables{}
	var errs []error
	for _, f := range []Family{IPv4, IPv6} {
		t, err := NewIPTables(backend, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ipt[f] = t
	}
	if len(ipt) == 0 {
		return nil, errors.Join(errs...)
	}
	// node-ip mode without a ClusterIP needs netlink too: to remove a
	// link another configuration left.
	nl, err := NewNetlink()
	if err != nil {
		return nil, err
	}
	// The release table is kept whatever the configuration: Sync deletes
	// one an earlier instance left when this one wants none.
	nft, err := NewNFT()
	if err != nil {
		if len(cfg.ReleaseTo) > 0 {
			return nil, err
		}
		// Nothing wanted there, and nothing can have been left there.
		nft = nil
	}
	m, err := NewWithNFT(cfg, log, set, nl, ipt, nft)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return m, nil
}

// Config returns the validated configuration.
func (m *Manager) Config() Config { return m.cfg }

// Status reports whether the last Sync left everything in place, with a
// detail for /ready and logs.
func (m *Manager) Status() (ok bool, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ok, m.status
}

// InstalledOnce reports whether some Sync has left everything in place
// (and no Teardown came after).
func (m *Manager) InstalledOnce() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.once
}

// fail counts and logs one setup error.
func (m *Manager) fail(op string, err error) error {
	m.met.setupErrors[op].Inc()
	m.log.Error("node network setup", zap.String("op", op), zap.Error(err))
	return err
}

// Sync converges the node to the desired state once: the interface with
// exactly LinkIPs (no interface when there are none), every rule at
// the top of its chain, and no nodedns rule that the configuration no longer
// wants. Every error is counted, logged and returned (joined); Sync carries
// on past errors so that one bad rule does not block the others.
func (m *Manager) Sync(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if !m.cfg.UsesLink() && m.nl != nil {
		// A link left by an earlier instance in another mode would still
		// capture the addresses it holds.
		if err := m.deleteLink(); err != nil {
			errs = append(errs, m.fail(opLink, err))
		}
	} else if m.cfg.UsesLink() {
		l, err := m.ensureLink()
		if err != nil {
			errs = append(errs, m.fail(opLink, err))
		} else if err := m.syncAddrs(l); err != nil {
			errs = append(errs, m.fail(opAddr, err))
		}
	}
	if err := m.syncRules(ctx, Rules(m.cfg)); err != nil {
		errs = append(errs, m.fail(opRules, err))
	}
	if err := m.syncRelease(false); err != nil {
		errs = append(errs, m.fail(opRules, err))
	}
	err := errors.Join(errs...)
	m.ok = err == nil
	if m.ok {
		m.once = true
		m.status = fmt.Sprintf("network installed (%s mode)", m.cfg.Mode)
		m.met.installed.Set(1)
	} else {
		m.status = "network setup: " + err.Error()
		m.met.installed.Set(0)
	}
	return err
}

// RemoveStale removes what an earlier instance left that this
// configuration does not want: nodedns rules for other addresses or ports,
// and other addresses on an existing interface (the whole interface when
// this configuration puts none there). It installs nothing that steers queries here, so it is safe
// before the backend is ready; what this configuration wants and finds in
// place stays, steering queries to this frontend, which already listens.
// It does converge the release table, which sends queries to the cluster's
// kube-dns, never here: from the moment a frontend starts, the local IPs
// answer through kube-proxy until it takes them over.
func (m *Manager) RemoveStale(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if m.nl != nil {
		if !m.cfg.UsesLink() {
			if err := m.deleteLink(); err != nil {
				errs = append(errs, m.fail(opLink, err))
			}
		} else if l, err := m.nl.LinkByName(m.cfg.Interface); err == nil && (l.Type() == kindDummy || l.Type() == kindBridge) {
			if err := m.removeUnwantedAddrs(l); err != nil {
				errs = append(errs, m.fail(opAddr, err))
			}
		}
	}
	if err := m.reconcileRules(ctx, Rules(m.cfg), false); err != nil {
		errs = append(errs, m.fail(opRules, err))
	}
	if err := m.syncRelease(false); err != nil {
		errs = append(errs, m.fail(opRules, err))
	}
	return errors.Join(errs...)
}

// Run calls Sync now and then every SyncInterval until ctx ends. Errors are
// counted and logged by Sync; Run carries on.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.SyncInterval)
	defer t.Stop()
	for {
		_ = m.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Release removes the rules that divert pods' queries to the frontend (raw
// PREROUTING NOTRACK) and keeps the rest, so that an instance that stops
// with no successor can go on answering what already reached its sockets
// while new queries take the path they take without nodedns (kube-proxy's
// DNAT of the ClusterIP, and for the local IPs the release table); the
// answers still leave untracked (raw OUTPUT). Teardown then removes
// everything but the release table.
//
// Before that, while the NOTRACK rules still keep every query out of
// conntrack, it forgets the entries of queries answered here while tracked
// (in Sync, between an address and its NOTRACK rule): such an entry binds
// its client port to "no NAT", and that port's next query, rewritten by the
// release table, would be lost. Then it makes the release table take new
// queries whether or not a socket is bound (ReleaseChains): once the
// NOTRACK rules go, no query is answered here tracked any more, and none
// makes such an entry. In this order no query meets either state.
func (m *Manager) Release(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if err := m.forgetServedHere(); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	if err := m.syncRelease(true); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	var keep []Rule
	for _, r := range Rules(m.cfg) {
		if r.Table != "raw" || r.Chain != "PREROUTING" {
			keep = append(keep, r)
		}
	}
	if err := m.reconcileRules(ctx, keep, false); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	return errors.Join(errs...)
}

// Teardown removes every nodedns rule (those of this configuration and any
// left over), then the interface: rules first, so that no packet is ever
// steered to addresses that are gone. All errors are joined. It keeps the
// release table (releasetable.go), which from then on sends queries to
// the local IPs to the kube-dns ClusterIP.
func (m *Manager) Teardown(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if err := m.syncRules(ctx, nil); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	if m.nl != nil {
		// In every mode: node-ip mode puts the ClusterIP there too. A
		// missing link is no error.
		if err := m.deleteLink(); err != nil {
			errs = append(errs, m.fail(opTeardown, err))
		}
	}
	// Back to the table's lasting form, which leaves alone whatever
	// serves the local IPs later.
	if err := m.syncRelease(false); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	if err := m.forgetServedHere(); err != nil {
		errs = append(errs, m.fail(opTeardown, err))
	}
	m.ok, m.once = false, false
	m.met.installed.Set(0)
	err := errors.Join(errs...)
	if err != nil {
		m.status = "network teardown: " + err.Error()
	} else {
		m.status = "network removed"
	}
	return err
}
