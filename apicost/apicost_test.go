package apicost

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/testbed"
)

// runWatchEnv makes the test binary act as one kube-proxy-watch process
// (TestMain), so the smoke test needs no second binary.
const runWatchEnv = "NODEDNS_APICOST_RUN_WATCH"

func TestMain(m *testing.M) {
	if os.Getenv(runWatchEnv) == "1" {
		fs := flag.NewFlagSet("kube-proxy-watch", flag.ExitOnError)
		kc := fs.String("kubeconfig", "", "")
		node := fs.String("node", "", "")
		synced := fs.String("synced-file", "", "")
		_ = fs.Parse(os.Args[1:])
		ctx, cancel := signalContext()
		defer cancel()
		if err := RunProxyWatch(ctx, *kc, *node, *synced); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// smokeUnavailable says why the smoke test cannot run here, or "".
func smokeUnavailable() (backend, reason string) {
	if os.Geteuid() != 0 {
		return "", fmt.Sprintf("needs root (running as uid %d): the study resets kube-apiserver's peak RSS through /proc/<pid>/clear_refs, as the measurement requires", os.Geteuid())
	}
	if r := testbed.Unavailable(); r != "" {
		return "", r
	}
	dir, err := testbed.BinDir()
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", "kube-apiserver not built in " + dir + ": run `make tools` (10-20 minutes the first time)"
	}
	backend = os.Getenv("NODEDNS_BACKEND_BIN")
	if backend == "" {
		backend = filepath.Join("..", "bin", "nodedns-backend")
	}
	if _, err := os.Stat(backend); err != nil {
		return "", backend + " missing: run `make build` (or set NODEDNS_BACKEND_BIN)"
	}
	return backend, ""
}

// TestSmoke runs the whole study at a tiny scale (3 nodes, 20 Services) and
// checks that every table has numbers and that each agent opened its watch
// set: 4 watches per nodedns backend (3 with endpointslices all), 4 per
// kube-proxy watch set; and that an update of the EndpointSlice
// controller's ClusterIP slice reaches no spec backend, while a headless
// Service's reaches every backend and no kube-proxy, and a selector-less
// slice reaches both.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed study; -short given")
	}
	backend, reason := smokeUnavailable()
	if reason != "" {
		t.Skip("apicost smoke test: " + reason)
	}
	var out bytes.Buffer
	cfg := Config{
		Nodes:               []int{3},
		Services:            20,
		EndpointsPerService: 5,
		ChurnEndpoints:      10,
		ChurnInterval:       100 * time.Millisecond,
		CompareAll:          true,
		ChurnKinds:          true,
		Settle:              time.Second,
		Window:              3 * time.Second,
		BurstWindow:         3 * time.Second,
		ReadyTimeout:        time.Minute,
		BackendBinary:       backend,
		WatchCommand:        []string{os.Args[0]},
		WatchEnv:            []string{runWatchEnv + "=1"},
		Logf:                t.Logf,
		Out:                 &out,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}

	none, _ := rep.steady(SetNone, 0)
	kp, ok1 := rep.steady(SetProxy, 3)
	both, ok2 := rep.steady(SetBoth, 3)
	all, ok3 := rep.steady(SetBothAll, 3)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("steady windows missing: %+v", rep.Steady)
	}
	if got := kp.Watches - none.Watches; got != 3*4 {
		t.Errorf("kube-proxy watch set added %v watches, want 12 (services, endpointslices, servicecidrs, node × 3)", got)
	}
	if got := both.Watches - kp.Watches; got != 3*4 {
		t.Errorf("nodedns added %v watches, want 12 (services, 2 endpointslices, namespaces × 3)", got)
	}
	if got := all.Watches - kp.Watches; got != 3*3 {
		t.Errorf("nodedns with endpointslices all added %v watches, want 9 (services, endpointslices, namespaces × 3)", got)
	}
	// Events per endpoint update, over the no-agent window's: what each
	// watch set receives of one update.
	events := perUpdate(func(r Result) float64 { return r.WatchEvents })
	fanout := func(r Result) float64 { return events(r) - events(none) }
	for _, c := range []struct {
		what string
		r    Result
		want float64
	}{
		{"ClusterIP churn, kube-proxy alone", kp, 3},
		{"ClusterIP churn, with nodedns (spec)", both, 3},
		{"ClusterIP churn, with nodedns (all)", all, 6},
	} {
		if got := fanout(c.r); math.Abs(got-c.want) > 0.5 {
			t.Errorf("%s: %.2f watch events per update over no agents, want %.0f", c.what, got, c.want)
		}
	}
	if len(rep.ChurnKinds) != 2 {
		t.Fatalf("%d churn-kind windows, want 2 (headless, selector-less)", len(rep.ChurnKinds))
	}
	for i, want := range []float64{3, 6} { // headless: the 3 backends; selector-less: backends and kube-proxies
		r := rep.ChurnKinds[i]
		if got := fanout(r); math.Abs(got-want) > 0.5 {
			t.Errorf("%s: %.2f watch events per update over no agents, want %.0f", r.Label, got, want)
		}
	}
	for _, r := range []Result{kp, both, all} {
		if r.APICPU <= 0 || r.APIRSS <= 0 || r.WatchBytes <= 0 || r.WatchEvents <= 0 || r.ChurnUpdates <= 0 {
			t.Errorf("%s: want positive API server CPU, RSS, watch bytes and events, churn: %s", r.Label, r.line())
		}
	}
	if both.Backends.Procs != 3 || both.Backends.RSS <= 0 {
		t.Errorf("backends: %+v, want 3 processes with memory", both.Backends)
	}
	if len(rep.Bursts) != 3 {
		t.Errorf("%d bursts, want 3 (nodedns rollout, API server restart, kube-proxy rollout)", len(rep.Bursts))
	}
	for _, b := range rep.Bursts {
		if b.APICPU <= 0 || b.APIPeakRSS <= 0 {
			t.Errorf("%s: no API server CPU or peak RSS: %s", b.Label, b.line())
		}
		if strings.Contains(b.Label, "rollout") && b.SyncedAfter <= 0 {
			t.Errorf("%s: agents never synced", b.Label)
		}
	}
	for _, f := range rep.Fits {
		if math.IsNaN(f.Fit.PerNode) {
			t.Errorf("fit %s/%s: NaN", f.Metric, f.Set)
		}
	}

	// Every data row of every table holds numbers; no NaN, Inf or blank.
	num := regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?( / [0-9.]+)?$`)
	lines := strings.Split(out.String(), "\n")
	rows := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|-") {
			continue
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|-") {
			continue // a header
		}
		rows++
		numbers := 0
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			c = strings.TrimSpace(c)
			if c == "" || strings.Contains(c, "NaN") || strings.Contains(c, "Inf") {
				t.Errorf("row %q: cell %q", line, c)
			}
			if num.MatchString(c) {
				numbers++
			}
		}
		if numbers < 2 {
			t.Errorf("row %q: %d numbers", line, numbers)
		}
	}
	if rows < 10 {
		t.Errorf("%d table rows, want at least 10", rows)
	}
}

// signalContext ends on SIGINT or SIGTERM (the study stops its agents so).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
