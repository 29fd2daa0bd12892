// Package apicost measures what a nodedns backend on every node costs the
// Kubernetes API server, next to what kube-proxy's watches on every node
// already cost, on the testbed (real etcd and kube-apiserver).
//
// A simulated node is a process: nodedns-backend (CoreDNS with the
// kubernetes plugin) for nodedns, and RunProxyWatch for kube-proxy. The
// study reads kube-apiserver's own /metrics and /proc in steady state (with
// an endpoint rolling update under way), in the 30s after every agent
// restarts at once (a DaemonSet rollout) and after kube-apiserver restarts
// (every watcher relists), fits the costs against the node count and
// extrapolates. With Config.Simulate, thousands of nodes of each Design run
// as goroutines of one process instead (RunSimWatchers, simulate.go).
// docs/apiserver-cost.md holds the method and the results.
package apicost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/testbed"
)

// Labels of the steady-state windows and bursts.
const (
	SetNone  = "no agents"
	SetProxy = "kube-proxy watch set"
	SetBoth  = "kube-proxy + nodedns"
	// SetBothAll is SetBoth with the backends' endpointslices all: the
	// kubernetes plugin's own watch of every EndpointSlice.
	SetBothAll = "kube-proxy + nodedns (endpointslices all)"
)

// study is one run: the testbed, the two fleets and the churn.
type study struct {
	cfg      Config
	tb       *testbed.Testbed
	backends *fleet
	proxies  *fleet
	// sims is the simulator process of the -simulate windows (nil until then).
	sims *fleet
	// churns are the rolling slices: the ClusterIP Service's (steady
	// state), then, with cfg.ChurnKinds, the headless and the selector-less
	// Service's, paused until their windows.
	churns []*churner
	// watchList is the WatchListClient gate of backends started next.
	watchList bool
	// endpointSlices is the nodedns_kubernetes endpointslices mode of
	// backends started next.
	endpointSlices string
	// proxyKC and backendKC are the kubeconfigs of kube-proxy's and of the
	// backends' identities.
	proxyKC, backendKC string
	logf               func(string, ...any)
}

// Run runs the study and returns its report; the tables also go to
// cfg.Out as they are measured. Every process and directory it created is
// gone when it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	// Agents run in the study's directory: a relative path would not resolve.
	bin, err := filepath.Abs(cfg.BackendBinary)
	if err != nil {
		return nil, fmt.Errorf("backend binary: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("backend binary: %w (run `make build`)", err)
	}
	cfg.BackendBinary = bin
	s := &study{cfg: cfg, logf: cfg.Logf, watchList: true, endpointSlices: kubespec.WatchSpec}
	rep := &Report{Config: cfg}

	tb, err := testbed.Start(ctx, testbed.Options{Logf: cfg.Logf})
	if err != nil {
		return nil, err
	}
	s.tb = tb
	dir, err := os.MkdirTemp("", "nodedns-apicost-")
	if err != nil {
		return nil, errors.Join(err, tb.Stop())
	}
	s.backends = backendFleet(dir, "", "", &s.watchList, &s.endpointSlices) // paths set below
	s.proxies = proxyWatchFleet(dir, cfg.WatchCommand, cfg.WatchEnv, "")
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer func() {
		stopChurn()
		err = errors.Join(err, s.backends.stopAll(), s.proxies.stopAll(), tb.Stop(), os.RemoveAll(dir))
	}()

	if err := s.prepare(ctx, churnCtx, dir, rep); err != nil {
		return rep, err
	}
	if len(cfg.Simulate) > 0 {
		// The simulated study replaces the process windows; its
		// calibration runs real agents at the low end.
		if err := s.simulate(ctx, dir, rep); err != nil {
			return rep, err
		}
		return rep, nil
	}
	if cfg.Calibrate {
		if reason := testbed.UnavailableNodes(); reason != "" {
			rep.CalibrationSkipped = reason
			s.logf("calibration skipped: %s", reason)
		} else if err := s.calibrate(ctx, dir, rep); err != nil {
			return rep, fmt.Errorf("calibration: %w", err)
		}
	}
	if err := s.steady(ctx, rep); err != nil {
		return rep, err
	}
	if err := s.churnKinds(ctx, rep); err != nil {
		return rep, err
	}
	if err := s.bursts(ctx, rep); err != nil {
		return rep, err
	}
	rep.finish()
	rep.writeSummary(cfg.Out)
	return rep, nil
}

// prepare creates credentials, Nodes, the Services and the churn, and
// measures the API server with no agents.
func (s *study) prepare(ctx, churnCtx context.Context, dir string, rep *Report) error {
	c := s.tb.Client()
	if u, err := readProc(s.tb.APIServerPID()); err == nil {
		rep.EmptyAPIRSS = u.RSS
	}
	if err := backendRBAC(ctx, c); err != nil {
		return err
	}
	backendKC, err := s.tb.ServiceAccountKubeconfig(ctx, "kube-system", backendSA)
	if err != nil {
		return err
	}
	// kube-proxy's default RBAC: the user system:kube-proxy is bound to the
	// system:node-proxier ClusterRole by the bootstrap policy.
	proxyKC, err := s.tb.KubeconfigFor("system:kube-proxy")
	if err != nil {
		return err
	}
	s.proxyKC, s.backendKC = proxyKC, backendKC
	s.backends = backendFleet(dir, s.cfg.BackendBinary, backendKC, &s.watchList, &s.endpointSlices)
	s.proxies = proxyWatchFleet(dir, s.cfg.WatchCommand, s.cfg.WatchEnv, proxyKC)

	maxN := s.cfg.maxNodes()
	if err := createNodes(ctx, c, maxN); err != nil {
		return err
	}
	if err := testbed.EnsureNamespace(ctx, c, Namespace); err != nil {
		return err
	}
	start := time.Now()
	if err := createServices(ctx, c, s.cfg.Services, s.cfg.EndpointsPerService, maxN); err != nil {
		return err
	}
	s.logf("created %d Services with %d endpoints each in %v", s.cfg.Services, s.cfg.EndpointsPerService, time.Since(start).Round(time.Second))
	if s.cfg.ChurnEndpoints > 0 {
		type churnKind struct {
			name   string
			writer sliceWriter
		}
		kinds := []churnKind{{churnService, byController}}
		if s.cfg.ChurnKinds {
			kinds = append(kinds, churnKind{churnHeadlessService, byControllerHeadless}, churnKind{churnOperatorService, byOperator})
		}
		for i, k := range kinds {
			// Each churner's addresses start in a range of its own,
			// past the Services' endpoints.
			ch := &churner{c: c, service: k.name, writer: k.writer, size: s.cfg.ChurnEndpoints, nodes: maxN,
				interval: s.cfg.ChurnInterval, firstIP: s.cfg.Services*s.cfg.EndpointsPerService + i<<20}
			ch.paused.Store(i > 0)
			created := make(chan error, 1)
			go ch.run(churnCtx, created)
			if err := <-created; err != nil {
				return err
			}
			s.churns = append(s.churns, ch)
		}
	}
	if err := sleep(ctx, s.cfg.Settle); err != nil {
		return err
	}
	r, err := s.measure(ctx, SetNone, 0, s.cfg.Window, nil, nil)
	if err != nil {
		return err
	}
	rep.PopulatedAPIRSS = r.APIRSS
	rep.Steady = append(rep.Steady, r)
	s.logf("%s", r.line())
	return nil
}

// steady measures, for each node count, the kube-proxy watch set alone and
// then with nodedns backends added.
func (s *study) steady(ctx context.Context, rep *Report) error {
	type step struct {
		label string
		f     *fleet
		mode  string // backends' endpointslices
	}
	steps := []step{{SetProxy, s.proxies, ""}}
	if s.cfg.CompareAll {
		steps = append(steps, step{SetBothAll, s.backends, kubespec.WatchAll})
	}
	// The default last: its backends stay for the largest count's churn
	// kinds and bursts.
	steps = append(steps, step{SetBoth, s.backends, kubespec.WatchSpec})
	for i, n := range s.cfg.Nodes {
		for _, step := range steps {
			if step.mode != "" && step.mode != s.endpointSlices {
				if err := s.backends.stopAll(); err != nil {
					return err
				}
				s.endpointSlices = step.mode
			}
			start := time.Now()
			if err := step.f.grow(ctx, n, s.cfg.ReadyTimeout); err != nil {
				return err
			}
			s.logf("%d %s processes synced in %v", n, step.f.kind, time.Since(start).Round(time.Millisecond))
			if err := sleep(ctx, s.cfg.Settle); err != nil {
				return err
			}
			r, err := s.measure(ctx, step.label, n, s.cfg.Window, nil, nil)
			if err != nil {
				return err
			}
			rep.Steady = append(rep.Steady, r)
			s.logf("%s", r.line())
		}
		writeSteady(s.cfg.Out, rep.Steady)
		if i < len(s.cfg.Nodes)-1 {
			if err := s.backends.stopAll(); err != nil {
				return err
			}
		}
	}
	return nil
}

// churnKinds measures, at the largest node count with both fleets running
// (the backends with endpointslices spec), one window with the headless
// Service's slice rolling and one with the selector-less Service's, each
// instead of the ClusterIP churn.
func (s *study) churnKinds(ctx context.Context, rep *Report) error {
	if len(s.churns) < 3 {
		return nil
	}
	n := s.cfg.Nodes[len(s.cfg.Nodes)-1]
	defer func() {
		for i, ch := range s.churns {
			ch.paused.Store(i > 0)
		}
	}()
	for k, label := range []string{ChurnHeadless, ChurnSelectorless} {
		i := k + 1 // s.churns[0] is the ClusterIP churn
		for j, ch := range s.churns {
			ch.paused.Store(j != i)
		}
		if err := sleep(ctx, s.cfg.Settle); err != nil {
			return err
		}
		r, err := s.measure(ctx, label+", "+SetBoth, n, s.cfg.Window, nil, nil)
		if err != nil {
			return err
		}
		r.Churn = label
		rep.ChurnKinds = append(rep.ChurnKinds, r)
		s.logf("%s", r.line())
	}
	writeChurnKinds(s.cfg.Out, rep)
	return nil
}

// bursts runs, at the largest node count with both fleets running: the
// nodedns rollout and the API server restart with streaming lists off and
// on (or once, with the default, when cfg.WatchList is false), a kube-proxy
// rollout, and the API server restart with only kube-proxy's watches and
// with no watches at all.
func (s *study) bursts(ctx context.Context, rep *Report) error {
	n := s.cfg.Nodes[len(s.cfg.Nodes)-1]
	d := s.cfg.BurstWindow
	add := func(r Result, err error) error {
		if err != nil {
			return err
		}
		rep.Bursts = append(rep.Bursts, r)
		s.logf("%s", r.line())
		writeBursts(s.cfg.Out, rep.Bursts)
		return sleep(ctx, s.cfg.Settle)
	}
	rollout := func(f *fleet) (func() error, func(context.Context) error) {
		var started []*agent
		act := func() error {
			var err error
			started, err = f.rollout(n)
			return err
		}
		synced := func(ctx context.Context) error { return f.waitSynced(ctx, started, s.cfg.ReadyTimeout) }
		return act, synced
	}
	restart := func() error { return s.tb.RestartAPIServer(ctx) }

	gates := []bool{true}
	if s.cfg.WatchList {
		gates = []bool{false, true}
	}
	for _, on := range gates {
		s.watchList = on
		mode := "streaming lists " + onOff(on)
		act, synced := rollout(s.backends)
		if err := add(s.measure(ctx, "nodedns rollout ("+mode+")", n, d, act, synced)); err != nil {
			return err
		}
		if err := add(s.measure(ctx, "API server restart, "+SetBoth+" ("+mode+")", n, d, restart, nil)); err != nil {
			return err
		}
	}
	act, synced := rollout(s.proxies)
	if err := add(s.measure(ctx, "kube-proxy watch set rollout", n, d, act, synced)); err != nil {
		return err
	}
	if !s.cfg.RestartBaselines {
		return nil
	}
	if err := s.backends.stopAll(); err != nil {
		return err
	}
	if err := add(s.measure(ctx, "API server restart, "+SetProxy, n, d, restart, nil)); err != nil {
		return err
	}
	if err := s.proxies.stopAll(); err != nil {
		return err
	}
	return add(s.measure(ctx, "API server restart, "+SetNone, 0, d, restart, nil))
}

// calibrate compares the watches of one real kube-proxy (nftables mode, in a
// node network namespace) with those of one RunProxyWatch process.
func (s *study) calibrate(ctx context.Context, dir string, rep *Report) error {
	node, err := s.tb.AddNode(ctx, "calibration", "")
	if err != nil {
		return err
	}
	before, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	kp, err := s.tb.StartKubeProxy(ctx, node, testbed.ProxyModeNFTables)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	_, werr := kp.WaitForRules(wctx, Namespace+"/svc-0/")
	cancel()
	if werr != nil {
		return errors.Join(werr, kp.Stop())
	}
	if err := sleep(ctx, 5*time.Second); err != nil { // the Node and ServiceCIDR watches
		return errors.Join(err, kp.Stop())
	}
	real, err := s.snapshot(ctx)
	if err = errors.Join(err, kp.Stop()); err != nil {
		return err
	}
	if err := sleep(ctx, 5*time.Second); err != nil { // its watches close
		return err
	}
	mid, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	synced := dir + "/calibration.synced"
	argv := append(append([]string(nil), s.cfg.WatchCommand...),
		"--kubeconfig="+node.Kubeconfig, "--node="+node.Name, "--synced-file="+synced)
	// The watch-set process runs in the host namespace; node.Kubeconfig
	// points at NodeURL, which only node namespaces reach.
	argv = append([]string{"ip", "netns", "exec", node.Netns}, argv...)
	p, err := testbed.StartProcess(dir, "calibration-kube-proxy-watch", argv, s.cfg.WatchEnv)
	if err != nil {
		return err
	}
	defer p.Stop()
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for {
		if _, err := os.Stat(synced); err == nil {
			break
		}
		if done, perr := p.Exited(); done || time.Now().After(deadline) {
			return fmt.Errorf("calibration watch-set process not synced (exited %v: %v)\n%s", done, perr, p.LogTail())
		}
		if err := sleep(ctx, readyPoll); err != nil {
			return err
		}
	}
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	emu, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	for _, res := range []string{"services", "endpointslices", "servicecidrs", "nodes", "namespaces"} {
		rep.Calibration = append(rep.Calibration, CalibrationRow{
			Resource:  res,
			KubeProxy: real.c.WatchesBy[res] - before.c.WatchesBy[res],
			Emulator:  emu.c.WatchesBy[res] - mid.c.WatchesBy[res],
		})
	}
	writeCalibration(s.cfg.Out, rep.Calibration)
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SelfWatchCommand is the WatchCommand that runs this executable with
// subcommand, for commands that implement it with RunProxyWatch.
func SelfWatchCommand(subcommand string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	return []string{exe, subcommand}, nil
}
