package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// Chaos timing: the fault comes chaosAt into each run, and a killed
// process is started again after restartDelay (kubelet restarts a
// container after about a second at the earliest).
const (
	chaosAt      = 5 * time.Second
	restartDelay = time.Second
	backendDown  = 5 * time.Second
	// notReadyAfter is how long after a container dies its pod turns not
	// ready: kubelet's PLEG relists containers every second and reports a
	// container that is not running as not ready at once, without waiting
	// for the readiness probe (pkg/kubelet/prober UpdatePodStatus). The
	// EndpointSlice update and kube-proxy's sync (min-sync-period 1s)
	// come after it and are real here.
	notReadyAfter = time.Second
	// slowAfter marks a lookup that needed more than a retry's worth of
	// waiting or an answer that came that late: users notice.
	slowAfter = time.Second
	// floodFactor is the flood's rate as a multiple of the normal load.
	floodFactor = 4
)

// ChaosRow is one chaos experiment on one design: the normal load's
// lookups during the run and how many went wrong.
type ChaosRow struct {
	Experiment string `json:"experiment"`
	Design     string `json:"design"`
	Lookups    uint64 `json:"lookups"`
	// Lost lookups timed out on every attempt; Failed got an error
	// answer (SERVFAIL, REFUSED); Slow were answered after slowAfter.
	Lost   uint64 `json:"lost"`
	Failed uint64 `json:"failed"`
	Slow   uint64 `json:"slow"`
	// Longest is the longest wait of an answered lookup.
	Longest time.Duration `json:"longest_ns,omitempty"`
	// Load is the generator's result (per-second series for plots).
	Load  *gen.Result `json:"load,omitempty"`
	Note  string      `json:"note,omitempty"`
	Error string      `json:"error,omitempty"`
}

// experiment is a fault injected chaosAt into a run on one design.
type experiment struct {
	name string
	// inject makes the fault and returns a note.
	inject func(ctx context.Context, e *Env, t *trial) (string, error)
	// frontOnly: only designs with a node process pods talk to.
	frontOnly bool
	// flood runs a random-subdomain flood beside the normal load.
	flood bool
	// onePod sends the flood from one pod address of its own, as one
	// pod of a real node would, instead of the measured pods' addresses;
	// the measured pods then keep the comparison's mix, misses included.
	onePod bool
}

var experiments = []experiment{
	{name: "backend killed", inject: killAPITier},
	{name: "frontend upgrade", inject: upgradeFrontend, frontOnly: true},
	{name: "frontend SIGKILL", inject: killFrontend, frontOnly: true},
	{name: "API server restart", inject: func(ctx context.Context, e *Env, t *trial) (string, error) {
		start := time.Now()
		if err := e.tb.RestartAPIServer(ctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("kube-apiserver down and ready again in %v", time.Since(start).Round(100*time.Millisecond)), nil
	}},
	{name: "local pod crash loop", inject: crashLoop, frontOnly: true},
	{name: "local pod not ready", inject: notReady, frontOnly: true},
	{name: "random-subdomain flood", flood: true},
	{name: "random-subdomain flood from one pod", flood: true, onePod: true},
}

// chaos runs every experiment on every design, each design on a fresh
// node, with the comparison's rate and mix.
func (e *Env) chaos(ctx context.Context, cfg Config, w io.Writer) []ChaosRow {
	var rows []ChaosRow
	for _, name := range cfg.Designs {
		d, _ := DesignByName(name)
		fmt.Fprintf(w, "== chaos: %s\n", d.Name)
		t, err := e.startTrial(ctx, "chaos-"+d.Name, d, cfg, w)
		if err != nil {
			rows = append(rows, ChaosRow{Experiment: "start", Design: d.Name, Error: err.Error()})
			if t != nil {
				_ = t.close()
			}
			continue
		}
		for _, x := range experiments {
			if ctx.Err() != nil {
				break
			}
			if x.frontOnly && frontProcess(t) == nil || !strings.Contains(x.name, cfg.ChaosOnly) {
				continue
			}
			rows = append(rows, e.runExperiment(ctx, cfg, t, x, w))
		}
		if err := t.close(); err != nil {
			fmt.Fprintf(w, "   stop %s: %v\n", d.Name, err)
		}
	}
	return rows
}

func (e *Env) runExperiment(ctx context.Context, cfg Config, t *trial, x experiment, w io.Writer) ChaosRow {
	row := ChaosRow{Experiment: x.name, Design: t.design.Name}
	fmt.Fprintf(w, "== chaos: %s on %s, %v at %d lookups/s, fault at %v\n", x.name, t.design.Name, cfg.ChaosDuration, cfg.Rate, chaosAt)
	var wg sync.WaitGroup
	var injectErr error
	if x.inject != nil {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(chaosAt):
			}
			row.Note, injectErr = x.inject(ctx, e, t)
			if injectErr == nil {
				fmt.Fprintf(w, "   %s: %s\n", x.name, row.Note)
			}
		})
	}
	var floodRes *gen.Result
	var floodErr error
	if x.flood {
		wg.Go(func() {
			fc := cfg
			fc.Rate, fc.Mix, fc.Seed, fc.noisyPod = floodFactor*cfg.Rate, "flood", cfg.Seed+1, x.onePod
			// A pod's flood competes for the CPU like any process of
			// the node, not in real time: only the measured lookups
			// must begin on time.
			fc.GeneratorRealtime = false
			floodRes, floodErr = e.generate(ctx, t.node, t.run.Nameserver, fc, cfg.ChaosDuration, t.design.Name+"-flood", nil)
		})
	}
	nc := cfg
	if x.flood && !x.onePod {
		nc.Mix = "cluster:75,external:20"
	}
	res, err := e.generate(ctx, t.node, t.run.Nameserver, nc, cfg.ChaosDuration, t.design.Name+"-chaos-"+strings.ReplaceAll(x.name, " ", "-"), w)
	wg.Wait()
	if err = errors.Join(err, injectErr, floodErr); err != nil {
		row.Error = err.Error()
	}
	if x.flood && floodRes != nil {
		from := "the same pod addresses"
		if x.onePod {
			from = "one other pod address"
		}
		row.Note = fmt.Sprintf("flood %d lookups/s of random names beside it from %s: %.0f answered/s, %d timed out", fc(cfg), from, floodRes.Rate(), floodRes.Timeouts)
	}
	if res != nil {
		row.Load = res
		row.Lookups, row.Lost, row.Failed = res.Lookups, res.Timeouts, res.Failed
		row.Slow = res.Hist().CountAbove(slowAfter)
		row.Longest = res.Hist().Max()
	}
	// The next experiment starts from a working design.
	if err := waitDNS(ctx, nil, t.node.Pod.Name, t.run.Nameserver, time.Minute); err != nil && row.Error == "" {
		row.Error = "not answering after the experiment: " + err.Error()
	}
	return row
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitLog waits until p's log holds substr after offset.
func waitLog(ctx context.Context, p *process, offset int64, substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return p.errExited()
		}
		if b, err := os.ReadFile(p.LogPath); err == nil && int64(len(b)) > offset && strings.Contains(string(b[offset:]), substr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: no %q in %s after %v", p.Name, substr, p.LogPath, timeout)
}

func fc(cfg Config) int { return floodFactor * cfg.Rate }

// apiTierProcess is the CoreDNS that watches the API server for t.
func (e *Env) apiTierProcess(t *trial) **process {
	switch t.design.Name {
	case "coredns", "nodelocal":
		return &e.centralDNS
	case "zalando", dsLocal.design, dsPrefer.design:
		return &t.run.Procs[0]
	default:
		return &t.run.Backend
	}
}

// frontProcess is the node's process that pods talk to, or nil.
func frontProcess(t *trial) **process {
	switch t.design.Name {
	case "nodelocal", dsLocal.design, dsPrefer.design:
		return &t.run.Procs[0]
	case "zalando":
		return &t.run.Procs[1]
	case "nodedns":
		return &t.run.Frontend
	}
	return nil
}

// replace swaps a process everywhere the running design refers to it.
func (t *trial) replace(old, nu *process) {
	for i, p := range t.run.Procs {
		if p == old {
			t.run.Procs[i] = nu
		}
	}
	if t.run.Frontend == old {
		t.run.Frontend = nu
	}
	if t.run.Backend == old {
		t.run.Backend = nu
	}
}

// restartAfter kills *pp with SIGKILL, waits delay and starts it again.
func (e *Env) restartAfter(t *trial, pp **process, delay time.Duration) error {
	old := *pp
	old.Kill()
	time.Sleep(delay)
	nu, err := old.start()
	if err != nil {
		return err
	}
	*pp = nu
	t.replace(old, nu)
	return nil
}

func killAPITier(ctx context.Context, e *Env, t *trial) (string, error) {
	if t.design.Name == "nodedns" {
		return e.killNodednsBackend(ctx, t)
	}
	if t.run.ds != nil {
		return e.dsRestart(ctx, t, backendDown)
	}
	pp := e.apiTierProcess(t)
	where := "on the node"
	if *pp == e.centralDNS {
		where = "on the other node (central)"
	}
	if err := e.restartAfter(t, pp, backendDown); err != nil {
		return "", err
	}
	return fmt.Sprintf("SIGKILL of the CoreDNS %s, started again %v later", where, backendDown), nil
}

func killFrontend(ctx context.Context, e *Env, t *trial) (string, error) {
	if t.run.ds != nil {
		return e.dsRestart(ctx, t, restartDelay)
	}
	pp := frontProcess(t)
	if err := e.restartAfter(t, pp, restartDelay); err != nil {
		return "", err
	}
	return fmt.Sprintf("SIGKILL of %s, started again %v later", (*pp).Name, restartDelay), nil
}

// upgradeFrontend replaces the process pods talk to as a rollout would:
// nodedns starts the new frontend first (surge) and it takes the sockets
// over before the old one stops; the others have no handover, so the old
// process stops (SIGTERM) and the new one starts.
func upgradeFrontend(ctx context.Context, e *Env, t *trial) (string, error) {
	if t.run.ds != nil {
		return e.dsRoll(ctx, t)
	}
	pp := frontProcess(t)
	old := *pp
	if t.design.Name != "nodedns" {
		start := time.Now()
		_ = old.Stop()
		nu, err := old.start()
		if err != nil {
			return "", err
		}
		*pp = nu
		t.replace(old, nu)
		return fmt.Sprintf("%s stopped (SIGTERM) and started again; %v until the new one was started", old.Name, time.Since(start).Round(10*time.Millisecond)), nil
	}
	offset := logSize(old.LogPath)
	nu, err := old.start()
	if err != nil {
		return "", err
	}
	start := time.Now()
	if err := waitLog(ctx, nu, offset, "sockets taken over", 30*time.Second); err != nil {
		return "", err
	}
	took := time.Since(start)
	_ = old.Signal(syscall.SIGTERM)
	*pp = nu
	t.replace(old, nu)
	go func() { _ = old.Stop() }()
	return fmt.Sprintf("new frontend took the sockets over and was ready in %v, then the old one got SIGTERM", took.Round(10*time.Millisecond)), nil
}

// killNodednsBackend kills the node's backend as killAPITier does and
// plays kubelet's part for the fallback Service: notReadyAfter the kill
// the pod is not ready and its endpoint not ready in the EndpointSlice
// (kube-proxy on the node then DNATs the fallback ClusterIP to the other
// node's backend only); after the restart, once the new backend's /ready
// answers (kubelet probes readiness at once for a container whose
// readiness is not known yet), ready again.
func (e *Env) killNodednsBackend(ctx context.Context, t *trial) (string, error) {
	n, old := t.node, t.run.Backend
	ep := fallbackEndpoint(n.IP.String())
	old.Kill()
	killed := time.Now()
	time.Sleep(notReadyAfter)
	// The backend starts again on time whatever happens to the endpoint.
	var gone time.Duration
	err := e.setFallbackReady(ctx, n.Name, false)
	if err == nil {
		err = waitRulesWithout(ctx, n, ep, backendDown-notReadyAfter)
		gone = time.Since(killed)
	}
	time.Sleep(time.Until(killed.Add(backendDown)))
	nu, startErr := old.start()
	if startErr != nil {
		return "", errors.Join(err, startErr)
	}
	t.replace(old, nu)
	if err != nil {
		return "", err
	}
	if err := waitHTTP(ctx, nu, n.Netns, t.run.backendReady, 2*time.Minute); err != nil {
		return "", err
	}
	if err := e.setFallbackReady(ctx, n.Name, true); err != nil {
		return "", err
	}
	if _, err := n.kp.WaitForRules(ctx, ep); err != nil {
		return "", err
	}
	return fmt.Sprintf("SIGKILL of the CoreDNS on the node, started again %v later; its fallback endpoint left kube-proxy's rules %v after the kill and was back %v after it",
		backendDown, gone.Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond)), nil
}

// waitRulesWithout waits until kube-proxy on n no longer names substr.
func waitRulesWithout(ctx context.Context, n *simNode, substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rules, err := n.kp.Rules(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(rules, substr) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy on %s still has %s after %v", n.Name, substr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
