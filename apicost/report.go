package apicost

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Extrapolation targets of the report.
const (
	TargetNodes    = 5000
	TargetServices = 10000
)

// CalibrationRow is the number of watches one real kube-proxy and one
// watch-set process opened on a resource.
type CalibrationRow struct {
	Resource            string
	KubeProxy, Emulator float64
}

// Report is the study's outcome.
type Report struct {
	Config Config
	// EmptyAPIRSS and PopulatedAPIRSS are kube-apiserver's RSS (MiB) before
	// the Services were created and at the end of the no-agent window.
	EmptyAPIRSS, PopulatedAPIRSS float64
	Calibration                  []CalibrationRow
	CalibrationSkipped           string // why, when it did not run
	// Steady holds the no-agent window, then per node count the kube-proxy
	// watch set alone and with nodedns.
	Steady []Result
	// ChurnKinds holds the windows with the headless and the
	// selector-less Service's slice rolling, at the largest node count.
	ChurnKinds []Result
	Bursts     []Result
	// Fits of steady-state costs against node count, by metric then set.
	Fits []FitRow
	// Sim holds the -simulate windows: the no-agent baselines of each
	// phase, then per node count and design its three phases.
	Sim            []SimRow
	SimCalibration []CalRow
}

// Kinds of churning Service.
const (
	ChurnClusterIP    = "ClusterIP churn"
	ChurnHeadless     = "headless churn"
	ChurnSelectorless = "selector-less churn"
)

// FitRow is one fitted metric of one watch set.
type FitRow struct {
	Metric, Set, Unit string
	Fit               Fit
}

// steadyMetrics are the fitted steady-state quantities.
var steadyMetrics = []struct {
	name, unit string
	value      func(Result) float64
}{
	{"kube-apiserver CPU", "cores", func(r Result) float64 { return r.CPUCores() }},
	{"kube-apiserver RSS", "MiB", func(r Result) float64 { return r.APIRSS }},
	{"watch bytes sent", "KiB/s", func(r Result) float64 { return r.WatchBytes / 1024 / r.Seconds }},
	{"watch events sent", "1/s", func(r Result) float64 { return r.WatchEvents / r.Seconds }},
	// The churn is one goroutine updating one slice; on a loaded machine an
	// update can take longer than the interval, so the rate varies between
	// windows. Per update, the fan-out is comparable across windows.
	{"watch bytes per endpoint update", "KiB", perUpdate(func(r Result) float64 { return r.WatchBytes / 1024 })},
	{"watch events per endpoint update", "", perUpdate(func(r Result) float64 { return r.WatchEvents })},
	{"open watches", "", func(r Result) float64 { return r.Watches }},
}

// perUpdate divides v by the window's endpoint updates (NaN without churn).
func perUpdate(v func(Result) float64) func(Result) float64 {
	return func(r Result) float64 {
		if r.ChurnUpdates == 0 {
			return math.NaN()
		}
		return v(r) / r.ChurnUpdates
	}
}

// finish computes the fits: each set over its node counts plus the
// no-agent window at 0 nodes.
func (rep *Report) finish() {
	rep.Fits = nil
	for _, m := range steadyMetrics {
		for _, set := range []string{SetProxy, SetBothAll, SetBoth} {
			var x, y []float64
			for _, r := range rep.Steady {
				if v := m.value(r); (r.Label == set || r.Label == SetNone) && !math.IsNaN(v) {
					x = append(x, float64(r.Nodes))
					y = append(y, v)
				}
			}
			if len(x) < 2 {
				continue // the set did not run
			}
			rep.Fits = append(rep.Fits, FitRow{Metric: m.name, Set: set, Unit: m.unit, Fit: fitLine(x, y)})
		}
	}
}

// Steady returns the steady-state result of set at n nodes.
func (rep *Report) steady(set string, n int) (Result, bool) {
	for _, r := range rep.Steady {
		if r.Label == set && r.Nodes == n {
			return r, true
		}
	}
	return Result{}, false
}

// line is a one-line log summary of r.
func (r Result) line() string {
	return fmt.Sprintf("%s, %d nodes: %.0fs, apiserver %.3f cores (%.1f CPU-s), RSS %.0f MiB (peak %.0f), watches %.0f, watch events %.0f (%.0f KiB), lists %.0f (%.0f KiB), backends %d (%.2f CPU-s, %.0f MiB), kube-proxy watchers %d (%.2f CPU-s, %.0f MiB), churn updates %.0f, synced after %v",
		r.Label, r.Nodes, r.Seconds, r.CPUCores(), r.APICPU, r.APIRSS, r.APIPeakRSS, r.Watches, r.WatchEvents, r.WatchBytes/1024,
		r.Lists, r.ListBytes/1024, r.Backends.Procs, r.Backends.CPU, r.Backends.RSS, r.ProxyWatch.Procs, r.ProxyWatch.CPU, r.ProxyWatch.RSS,
		r.ChurnUpdates, r.SyncedAfter)
}

// writeSteady writes the steady-state table.
func writeSteady(w io.Writer, rows []Result) {
	fmt.Fprintf(w, "\n### Steady state (per window)\n\n")
	fmt.Fprintf(w, "| nodes | watch set | window s | apiserver CPU cores | apiserver RSS MiB | open watches | watch events/s | watch KiB/s | endpoint updates/s | watch KiB per update | backends CPU cores (sum) | backend RSS MiB (sum / max) | kube-proxy-watch CPU cores (sum) | kube-proxy-watch RSS MiB (sum / max) |\n")
	fmt.Fprintf(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %s | %.0f | %.3f | %.0f | %.0f | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s |\n",
			r.Nodes, r.Label, r.Seconds, r.CPUCores(), r.APIRSS, r.Watches, r.WatchEvents/r.Seconds, r.WatchBytes/1024/r.Seconds,
			r.ChurnUpdates/r.Seconds, num(perUpdate(func(r Result) float64 { return r.WatchBytes / 1024 })(r)), cores(r.Backends, r.Seconds), mem(r.Backends), cores(r.ProxyWatch, r.Seconds), mem(r.ProxyWatch))
	}
}

// num formats v, "-" for NaN.
func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func cores(u Usage, seconds float64) string {
	if u.Procs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", u.CPU/seconds)
}

func mem(u Usage) string {
	if u.Procs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.1f", u.RSS, u.MaxRSS)
}

// writeAdded writes what nodedns adds to the kube-proxy watch set at each
// node count, and the ratio to the kube-proxy watch set's own cost over the
// no-agent baseline.
func writeAdded(w io.Writer, rep *Report) {
	base, ok := rep.steady(SetNone, 0)
	if !ok {
		return
	}
	fmt.Fprintf(w, "\n### What nodedns adds (kube-proxy + nodedns minus kube-proxy alone; ratio = added / kube-proxy's own cost over no agents)\n\n")
	fmt.Fprintf(w, "| nodes | nodedns endpointslices | Δ apiserver CPU cores | ratio | Δ apiserver RSS MiB | ratio | Δ open watches | ratio | Δ watch KiB per endpoint update | ratio | Δ watch events per endpoint update | ratio | apiserver CPU with nodedns / kube-proxy's alone |\n")
	fmt.Fprintf(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range rep.Config.Nodes {
		for _, set := range []struct{ label, mode string }{{SetBothAll, "all"}, {SetBoth, "spec"}} {
			kp, ok1 := rep.steady(SetProxy, n)
			both, ok2 := rep.steady(set.label, n)
			if !ok1 || !ok2 {
				continue
			}
			fmt.Fprintf(w, "| %d | %s |", n, set.mode)
			for _, m := range []func(Result) float64{
				func(r Result) float64 { return r.CPUCores() },
				func(r Result) float64 { return r.APIRSS },
				func(r Result) float64 { return r.Watches },
				perUpdate(func(r Result) float64 { return r.WatchBytes / 1024 }),
				perUpdate(func(r Result) float64 { return r.WatchEvents }),
			} {
				added := m(both) - m(kp)
				own := m(kp) - m(base)
				fmt.Fprintf(w, " %.3g | %s |", added, ratio(added, own))
			}
			fmt.Fprintf(w, " %s |\n", ratio(both.CPUCores()-base.CPUCores(), kp.CPUCores()-base.CPUCores()))
		}
	}
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// writeChurnKinds writes the fan-out of one endpoint update by the kind of
// Service whose slice rolls, at the largest node count: the ClusterIP rows
// come from the steady-state windows.
func writeChurnKinds(w io.Writer, rep *Report) {
	maxN := rep.Config.Nodes[len(rep.Config.Nodes)-1]
	base, ok := rep.steady(SetNone, 0)
	if !ok {
		return
	}
	rows := []Result{}
	for _, set := range []string{SetProxy, SetBothAll, SetBoth} {
		if r, ok := rep.steady(set, maxN); ok {
			r.Churn = ChurnClusterIP
			rows = append(rows, r)
		}
	}
	rows = append(rows, rep.ChurnKinds...)
	fmt.Fprintf(w, "\n### Fan-out of one endpoint update by kind of Service, %d nodes (per node: minus the no-agent window, / %d)\n\n", maxN, maxN)
	fmt.Fprintf(w, "| window | endpoint updates/s | watch events per update | per node | watch KiB per update | per node |\n|---|---:|---:|---:|---:|---:|\n")
	ev := perUpdate(func(r Result) float64 { return r.WatchEvents })
	kib := perUpdate(func(r Result) float64 { return r.WatchBytes / 1024 })
	for _, r := range rows {
		label := r.Label
		if r.Churn == ChurnClusterIP {
			label = ChurnClusterIP + ", " + r.Label
		}
		fmt.Fprintf(w, "| %s | %.1f | %s | %s | %s | %s |\n", label, r.ChurnUpdates/r.Seconds,
			num(ev(r)), num((ev(r)-ev(base))/float64(maxN)), num(kib(r)), num((kib(r)-kib(base))/float64(maxN)))
	}
}

// writeBursts writes the burst table.
func writeBursts(w io.Writer, rows []Result) {
	fmt.Fprintf(w, "\n### Bursts (window after the event; after a restart, kube-apiserver's figures count from its start)\n\n")
	fmt.Fprintf(w, "| event | nodes | window s | apiserver CPU s | apiserver peak RSS MiB | LIST requests | LIST MiB | watch events | watch MiB | agents synced after s | restarted agents CPU s | restarted agents RSS MiB (sum) |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		synced := "-"
		if r.SyncedAfter > 0 {
			synced = fmt.Sprintf("%.1f", r.SyncedAfter.Seconds())
		}
		agents := r.Backends
		if strings.HasPrefix(r.Label, "kube-proxy") {
			agents = r.ProxyWatch
		}
		cpu, rss := "-", "-"
		if r.SyncedAfter > 0 {
			cpu, rss = fmt.Sprintf("%.1f", agents.CPU), fmt.Sprintf("%.0f", agents.RSS)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.0f | %.0f | %.1f | %.0f | %.1f | %s | %s | %s |\n",
			r.Label, r.Nodes, r.Seconds, r.APICPU, r.APIPeakRSS, r.Lists, r.ListBytes/(1<<20), r.WatchEvents, r.WatchBytes/(1<<20), synced, cpu, rss)
	}
}

// writeCalibration writes the watch comparison of a real kube-proxy and the
// watch-set process.
func writeCalibration(w io.Writer, rows []CalibrationRow) {
	fmt.Fprintf(w, "\n### Calibration: open watches of one real kube-proxy v1.36.3 (nftables) and one kube-proxy-watch process\n\n")
	fmt.Fprintf(w, "| resource | kube-proxy | kube-proxy-watch |\n|---|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.0f | %.0f |\n", r.Resource, r.KubeProxy, r.Emulator)
	}
}

// writeFits writes the linear fits and their value at TargetNodes.
func writeFits(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\n### Linear fits against nodes (no-agent window as 0 nodes) and extrapolation to %d nodes (same Services and churn)\n\n", TargetNodes)
	fmt.Fprintf(w, "| metric | watch set | intercept | per node | R² | at %d nodes |\n|---|---|---:|---:|---:|---:|\n", TargetNodes)
	for _, f := range rep.Fits {
		r2 := "n/a"
		if !math.IsNaN(f.Fit.R2) {
			r2 = fmt.Sprintf("%.3f", f.Fit.R2)
		}
		fmt.Fprintf(w, "| %s (%s) | %s | %.4g | %.4g | %s | %.4g |\n", f.Metric, f.Unit, f.Set, f.Fit.Intercept, f.Fit.PerNode, r2, f.Fit.At(TargetNodes))
	}
}

// writeRelist writes the cost of one agent's initial list and watch, from
// the rollouts: every agent of a kind restarts against a warm API server,
// so the window's cost minus the steady state's (kube-proxy + nodedns at the
// same node count, per second) divided by the node count is one relist.
// It is scaled to TargetNodes and to TargetServices (lists grow with the
// Services and their slices).
func writeRelist(w io.Writer, rep *Report) {
	maxN := rep.Config.Nodes[len(rep.Config.Nodes)-1]
	steady, ok := rep.steady(SetBoth, maxN)
	if !ok {
		return
	}
	scale := float64(TargetServices) / float64(rep.Config.Services)
	fmt.Fprintf(w, "\n### One relist per node (rollout window minus steady state, / %d nodes), extrapolated to %d nodes and %d Services (× %.0f)\n\n", maxN, TargetNodes, TargetServices, scale)
	fmt.Fprintf(w, "| rollout | apiserver CPU s per node | KiB sent per node (LIST + watch) | all %d nodes at once, %d Services: CPU s | GiB |\n|---|---:|---:|---:|---:|\n", TargetNodes, TargetServices)
	for _, r := range rep.Bursts {
		if !strings.Contains(r.Label, "rollout") || r.Nodes == 0 {
			continue
		}
		n := float64(r.Nodes)
		cpu := (r.APICPU - steady.CPUCores()*r.Seconds) / n
		bytes := (r.ListBytes + r.WatchBytes - (steady.ListBytes+steady.WatchBytes)/steady.Seconds*r.Seconds) / n
		fmt.Fprintf(w, "| %s | %.4f | %.1f | %.0f | %.1f |\n", r.Label, cpu, bytes/1024, cpu*TargetNodes*scale, bytes*TargetNodes*scale/(1<<30))
	}
}

// writeSummary writes every table.
func (rep *Report) writeSummary(w io.Writer) {
	c := rep.Config
	fmt.Fprintf(w, "\n## apicost: %d Services × %d endpoints, churn %d endpoints every %v, nodes %v, window %v, burst window %v\n",
		c.Services, c.EndpointsPerService, c.ChurnEndpoints, c.ChurnInterval, c.Nodes, c.Window, c.BurstWindow)
	fmt.Fprintf(w, "\nkube-apiserver RSS: %.0f MiB empty, %.0f MiB with the Services (no agents)\n", rep.EmptyAPIRSS, rep.PopulatedAPIRSS)
	if len(rep.Calibration) > 0 {
		writeCalibration(w, rep.Calibration)
	} else if rep.CalibrationSkipped != "" {
		fmt.Fprintf(w, "\nCalibration against a real kube-proxy skipped: %s\n", rep.CalibrationSkipped)
	}
	writeSteady(w, rep.Steady)
	writeAdded(w, rep)
	writeFits(w, rep)
	writeChurnKinds(w, rep)
	writeBursts(w, rep.Bursts)
	writeRelist(w, rep)
}
