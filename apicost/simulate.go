package apicost

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/testbed"
)

// Phases of a simulated design's windows.
const (
	PhaseIdle    = "steady (no churn)"
	PhaseChurn   = "endpoint churn"
	PhaseRestart = "API server restart"
)

// SimRow is one window of simulated nodes (or of none: Design "").
type SimRow struct {
	Design Design
	Phase  string
	Result Result
	// Expected and Relisted are, for a restart, the watches of the design
	// times the nodes and the lists they completed after it; RelistedAfter
	// is when the last of them completed, from the restart's start.
	Expected, Relisted int
	RelistedAfter      time.Duration
	// SyncedAfter is how long the nodes took to sync when they started.
	SyncedAfter time.Duration
	// Failed says why the window has no figures: kube-apiserver did not
	// come back from the restart under this design's relist storm.
	Failed string
}

// CalRow compares real agents with simulated nodes of one design: the same
// window (endpoint churn) with n processes of the real client, then with n
// simulated nodes.
type CalRow struct {
	Design    Design
	Nodes     int
	Real, Sim Result
}

// simFleet runs one simulator process of n nodes of design d.
func (s *study) simFleet(dir, kubeconfig string, d Design, n int) *fleet {
	f := &fleet{kind: kindSim, dir: dir}
	f.start = func(_, gen int) (*agent, error) {
		name := fmt.Sprintf("sim-%s-%d-g%d", d, n, gen)
		status := filepath.Join(dir, name+".status")
		argv := append(append([]string(nil), s.cfg.SimCommand...),
			"--kubeconfig="+kubeconfig, "--design="+string(d), "--nodes="+strconv.Itoa(n),
			"--ramp="+strconv.Itoa(s.cfg.SimRamp), "--status-file="+status)
		p, err := testbed.StartProcess(dir, name, argv, nil)
		if err != nil {
			return nil, err
		}
		ready := func() bool { st, err := readSimStatus(status); return err == nil && st.Synced >= n }
		return &agent{node: name, proc: p, ready: ready, status: status}, nil
	}
	return f
}

// readSimStatus reads a simulator's status file.
func readSimStatus(path string) (SimStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return SimStatus{}, err
	}
	return ParseSimStatus(string(b))
}

// kubeconfigOf is the kubeconfig of design d's real client in the study.
func (s *study) kubeconfigOf(d Design) string {
	if d == DesignKubeProxy {
		return s.proxyKC
	}
	return s.backendKC
}

// setChurn pauses or resumes the ClusterIP churn.
func (s *study) setChurn(on bool) {
	if len(s.churns) > 0 {
		s.churns[0].paused.Store(!on)
	}
}

// simulate runs the -simulate study: the no-agent baselines, the
// calibration of simulated against real nodes, then for each node count and
// design the three phases.
func (s *study) simulate(ctx context.Context, dir string, rep *Report) error {
	// Baselines: the API server with no agents, idle, under churn (the
	// prepare window) and restarting.
	s.setChurn(false)
	if err := sleep(ctx, s.cfg.Settle); err != nil {
		return err
	}
	r, err := s.measure(ctx, SetNone+", "+PhaseIdle, 0, s.cfg.Window, nil, nil)
	if err != nil {
		return err
	}
	rep.Sim = append(rep.Sim, SimRow{Phase: PhaseIdle, Result: r})
	s.logf("%s", r.line())
	s.setChurn(true)
	rep.Sim = append(rep.Sim, SimRow{Phase: PhaseChurn, Result: rep.Steady[0]})
	restart := func() error { return s.tb.RestartAPIServer(ctx) }
	if r, err = s.measure(ctx, SetNone+", "+PhaseRestart, 0, s.cfg.BurstWindow, restart, nil); err != nil {
		return err
	}
	rep.Sim = append(rep.Sim, SimRow{Phase: PhaseRestart, Result: r})
	s.logf("%s", r.line())

	if n := s.cfg.SimCalibrate; n > 0 {
		for _, d := range Designs {
			row, err := s.calibrateSim(ctx, dir, d, n)
			if err != nil {
				return err
			}
			rep.SimCalibration = append(rep.SimCalibration, row)
			writeSimCalibration(s.cfg.Out, rep)
		}
	}
	for _, n := range s.cfg.Simulate {
		for _, d := range Designs {
			if err := s.simulateDesign(ctx, dir, d, n, rep); err != nil {
				return err
			}
			writeSim(s.cfg.Out, rep)
		}
	}
	writeSimPerNode(s.cfg.Out, rep)
	if s.cfg.Plot != "" {
		if err := WriteSimPlot(s.cfg.Plot, rep); err != nil {
			return err
		}
		s.logf("figure: %s", s.cfg.Plot)
	}
	return nil
}

// calibrateSim measures n real agents of design d, then n simulated nodes,
// each in one churn window.
func (s *study) calibrateSim(ctx context.Context, dir string, d Design, n int) (CalRow, error) {
	row := CalRow{Design: d, Nodes: n}
	var real *fleet
	switch d {
	case DesignKubeProxy:
		real = s.proxies
	case DesignCoreDNS:
		s.endpointSlices, real = stockMode, s.backends
	case DesignNodedns:
		s.endpointSlices, real = kubespec.WatchSpec, s.backends
	}
	start := time.Now()
	if err := real.grow(ctx, n, s.cfg.ReadyTimeout); err != nil {
		return row, err
	}
	s.logf("calibration: %d real %s processes synced in %v", n, d, time.Since(start).Round(time.Millisecond))
	if err := sleep(ctx, s.cfg.Settle); err != nil {
		return row, err
	}
	r, err := s.measure(ctx, fmt.Sprintf("calibration, %d real %s", n, d), n, s.cfg.Window, nil, nil)
	if err != nil {
		return row, err
	}
	row.Real = r
	s.logf("%s", r.line())
	if err := real.stopAll(); err != nil {
		return row, err
	}
	s.sims = s.simFleet(dir, s.kubeconfigOf(d), d, n)
	defer func() { _ = s.sims.stopAll() }()
	if err := s.sims.grow(ctx, 1, s.cfg.ReadyTimeout); err != nil {
		return row, err
	}
	if err := sleep(ctx, s.cfg.Settle); err != nil {
		return row, err
	}
	if r, err = s.measure(ctx, fmt.Sprintf("calibration, %d simulated %s", n, d), n, s.cfg.Window, nil, nil); err != nil {
		return row, err
	}
	row.Sim = r
	s.logf("%s", r.line())
	return row, s.sims.stopAll()
}

// simulateDesign runs n simulated nodes of design d through the three
// phases: idle, churn, and an API server restart under churn.
func (s *study) simulateDesign(ctx context.Context, dir string, d Design, n int, rep *Report) error {
	specs, _, err := DesignWatches(d, nodeName(0))
	if err != nil {
		return err
	}
	s.setChurn(false)
	s.sims = s.simFleet(dir, s.kubeconfigOf(d), d, n)
	defer func() { _ = s.sims.stopAll(); s.setChurn(true) }()
	start := time.Now()
	if err := s.sims.grow(ctx, 1, s.cfg.ReadyTimeout); err != nil {
		return err
	}
	synced := time.Since(start)
	s.logf("%d simulated %s nodes synced in %v", n, d, synced.Round(time.Millisecond))

	if err := sleep(ctx, s.cfg.Settle); err != nil {
		return err
	}
	label := fmt.Sprintf("%d simulated %s", n, d)
	r, err := s.measure(ctx, label+", "+PhaseIdle, n, s.cfg.Window, nil, nil)
	if err != nil {
		return err
	}
	rep.Sim = append(rep.Sim, SimRow{Design: d, Phase: PhaseIdle, Result: r, SyncedAfter: synced})
	s.logf("%s", r.line())

	s.setChurn(true)
	if err := sleep(ctx, s.cfg.Settle/2); err != nil {
		return err
	}
	if r, err = s.measure(ctx, label+", "+PhaseChurn, n, s.cfg.Window, nil, nil); err != nil {
		return err
	}
	rep.Sim = append(rep.Sim, SimRow{Design: d, Phase: PhaseChurn, Result: r})
	s.logf("%s", r.line())

	// The restart: the window lasts until every watch of every node listed
	// again (or three burst windows passed).
	status := s.sims.agents[0].status
	before, err := readSimStatus(status)
	if err != nil {
		return err
	}
	row := SimRow{Design: d, Phase: PhaseRestart, Expected: n * len(specs)}
	t0 := time.Now()
	restart := func() error { return s.tb.RestartAPIServer(ctx) }
	relisted := func(ctx context.Context) error {
		last := before.Replaces
		for time.Since(t0) < 3*s.cfg.BurstWindow {
			st, err := readSimStatus(status)
			if err == nil && st.Replaces > last {
				last = st.Replaces
				row.RelistedAfter = time.Since(t0)
			}
			if int(last-before.Replaces) >= row.Expected {
				break
			}
			if err := sleep(ctx, StatusInterval); err != nil {
				return err
			}
		}
		row.Relisted = int(last - before.Replaces)
		return nil
	}
	if r, err = s.measure(ctx, label+", "+PhaseRestart, n, s.cfg.BurstWindow, restart, relisted); err != nil {
		if ctx.Err() != nil {
			return err
		}
		// The saturation this study looks for: record it, start the API
		// server again without the nodes, and go on with the next design.
		row.Failed, row.Result = err.Error(), Result{Label: label, Nodes: n}
		rep.Sim = append(rep.Sim, row)
		s.logf("%s: %v", label, err)
		if err := s.sims.stopAll(); err != nil {
			return err
		}
		return s.tb.RestartAPIServer(ctx)
	}
	row.Result = r
	rep.Sim = append(rep.Sim, row)
	s.logf("%s; relisted %d of %d after %v", r.line(), row.Relisted, row.Expected, row.RelistedAfter.Round(time.Millisecond))
	return nil
}

// simRow finds the window of design d at n nodes in phase (d "" and n 0: the
// no-agent baseline).
func (rep *Report) simRow(d Design, n int, phase string) (SimRow, bool) {
	for _, r := range rep.Sim {
		if r.Design == d && r.Result.Nodes == n && r.Phase == phase && r.Failed == "" {
			return r, true
		}
	}
	return SimRow{}, false
}

// writeSimCalibration writes the real-against-simulated table: each
// figure per second of window over the no-agent churn window's. Per second,
// not per update: a window of 20 updates counts one more or less at its
// edges, and the fan-out of the two runs would differ by 5% for nothing.
func writeSimCalibration(w io.Writer, rep *Report) {
	base, ok := rep.simRow("", 0, PhaseChurn)
	if !ok {
		return
	}
	b := base.Result
	fmt.Fprintf(w, "\n### Calibration: real agents against simulated nodes (endpoint churn, per second, over the no-agent window)\n\n")
	fmt.Fprintf(w, "| design | nodes | Δ open watches real / sim | Δ watch events/s real / sim | Δ watch KiB/s real / sim | sim / real | Δ apiserver CPU cores real / sim | sim / real | Δ apiserver RSS MiB real / sim |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range rep.SimCalibration {
		ev := func(r Result) float64 { return r.WatchEvents/r.Seconds - b.WatchEvents/b.Seconds }
		kib := func(r Result) float64 { return (r.WatchBytes/r.Seconds - b.WatchBytes/b.Seconds) / 1024 }
		cpu := func(r Result) float64 { return r.CPUCores() - b.CPUCores() }
		fmt.Fprintf(w, "| %s | %d | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %s | %.4f / %.4f | %s | %.0f / %.0f |\n",
			c.Design, c.Nodes, c.Real.Watches-b.Watches, c.Sim.Watches-b.Watches,
			ev(c.Real), ev(c.Sim), kib(c.Real), kib(c.Sim), ratio(kib(c.Sim), kib(c.Real)),
			cpu(c.Real), cpu(c.Sim), ratio(cpu(c.Sim), cpu(c.Real)),
			c.Real.APIRSS-b.APIRSS, c.Sim.APIRSS-b.APIRSS)
	}
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// perUpd is v per endpoint update of the window (NaN without updates).
func perUpd(r Result, v float64) float64 {
	if r.ChurnUpdates == 0 {
		return math.NaN()
	}
	return v / r.ChurnUpdates
}

// writeSim writes every simulated window.
func writeSim(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\n### Simulated nodes (per window; a restart's window lasts until every watch listed again)\n\n")
	fmt.Fprintf(w, "| nodes | design | phase | window s | apiserver CPU cores | CPU s | apiserver RSS / peak MiB | open watches | watch events | watch MiB | LIST requests | LIST MiB | endpoint updates/s | terminated watchers | simulator CPU cores | simulator RSS MiB | synced / relisted after s |\n")
	fmt.Fprintf(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range rep.Sim {
		r := row.Result
		d := string(row.Design)
		if d == "" {
			d = SetNone
		}
		after := "-"
		if row.Failed != "" {
			fmt.Fprintf(w, "| %d | %s | %s | kube-apiserver did not come back: %s |||||||||||||\n",
				r.Nodes, d, row.Phase, strings.ReplaceAll(firstLine(row.Failed), "|", "/"))
			continue
		}
		switch {
		case row.Phase == PhaseRestart && row.Design != "":
			after = fmt.Sprintf("%d/%d in %.1f", row.Relisted, row.Expected, row.RelistedAfter.Seconds())
		case row.SyncedAfter > 0:
			after = fmt.Sprintf("%.1f", row.SyncedAfter.Seconds())
		}
		sim := "-"
		if r.Sim.Procs > 0 {
			sim = fmt.Sprintf("%.0f", r.Sim.RSS)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %.0f | %.3f | %.1f | %.0f / %.0f | %.0f | %.0f | %.1f | %.0f | %.1f | %.2f | %.0f | %s | %s | %s |\n",
			r.Nodes, d, row.Phase, r.Seconds, r.CPUCores(), r.APICPU, r.APIRSS, r.APIPeakRSS, r.Watches, r.WatchEvents,
			r.WatchBytes/(1<<20), r.Lists, r.ListBytes/(1<<20), r.ChurnUpdates/r.Seconds, r.Terminated,
			cores(r.Sim, r.Seconds), sim, after)
	}
}

// perNodeMetrics are the per-node costs of a design over the no-agent
// window of the same phase.
var perNodeMetrics = []struct {
	phase, name string
	value       func(r, base Result, n float64) float64
}{
	{PhaseIdle, "apiserver CPU, mcores per node", func(r, b Result, n float64) float64 {
		return (r.CPUCores() - b.CPUCores()) * 1000 / n
	}},
	{PhaseIdle, "apiserver RSS, KiB per node", func(r, b Result, n float64) float64 {
		return (r.APIRSS - b.APIRSS) * 1024 / n
	}},
	{PhaseChurn, "apiserver CPU, µs per endpoint update per node", func(r, b Result, n float64) float64 {
		return (perUpd(r, r.APICPU) - perUpd(b, b.APICPU)) * 1e6 / n
	}},
	{PhaseChurn, "watch KiB per endpoint update per node", func(r, b Result, n float64) float64 {
		return (perUpd(r, r.WatchBytes) - perUpd(b, b.WatchBytes)) / 1024 / n
	}},
	{PhaseRestart, "apiserver CPU s per node (relist)", func(r, b Result, n float64) float64 {
		return (r.APICPU - b.APICPU) / n
	}},
	{PhaseRestart, "KiB sent per node (LIST + watch)", func(r, b Result, n float64) float64 {
		return (r.ListBytes + r.WatchBytes - b.ListBytes - b.WatchBytes) / 1024 / n
	}},
}

// writeSimPerNode writes each design's cost per node and its ratio to
// kube-proxy's at every simulated node count.
func writeSimPerNode(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\n### Per node, over the no-agent window of the same phase; ratio to kube-proxy's\n\n")
	fmt.Fprintf(w, "| nodes | phase | metric | kube-proxy | coredns-ds | ratio | nodedns | ratio |\n")
	fmt.Fprintf(w, "|---:|---|---|---:|---:|---:|---:|---:|\n")
	for _, n := range rep.Config.Simulate {
		for _, m := range perNodeMetrics {
			base, ok := rep.simRow("", 0, m.phase)
			if !ok {
				continue
			}
			var v [3]float64
			have := true
			for i, d := range Designs {
				row, ok := rep.simRow(d, n, m.phase)
				if !ok {
					have = false
					break
				}
				v[i] = m.value(row.Result, base.Result, float64(n))
			}
			if !have {
				continue
			}
			fmt.Fprintf(w, "| %d | %s | %s | %.3g | %.3g | %s | %.3g | %s |\n",
				n, m.phase, m.name, v[0], v[1], ratio(v[1], v[0]), v[2], ratio(v[2], v[0]))
		}
	}
}
