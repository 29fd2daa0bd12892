package apicost

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// requestLog is a fake kube-apiserver that answers LISTs with empty lists
// and WATCHes with the end of the initial events (then holds them open), and
// records each LIST and WATCH as what the API server would see: path,
// selectors, watch parameters and Accept. resourceVersion and timeoutSeconds
// vary per request and are left out.
type requestLog struct {
	mu   sync.Mutex
	seen map[string]int
}

// kinds are the list kinds and group versions of the fake's resources.
var fakeKinds = map[string][2]string{
	"/api/v1/services":                         {"Service", "v1"},
	"/api/v1/namespaces":                       {"Namespace", "v1"},
	"/api/v1/nodes":                            {"Node", "v1"},
	"/apis/discovery.k8s.io/v1/endpointslices": {"EndpointSlice", "discovery.k8s.io/v1"},
	"/apis/networking.k8s.io/v1/servicecidrs":  {"ServiceCIDR", "networking.k8s.io/v1"},
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, ok := fakeKinds[r.URL.Path]
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	var key []string
	for _, p := range []string{"labelSelector", "fieldSelector", "watch", "allowWatchBookmarks", "sendInitialEvents", "resourceVersionMatch", "limit"} {
		if v := q.Get(p); v != "" {
			key = append(key, p+"="+v)
		}
	}
	k := r.URL.Path + "?" + strings.Join(key, "&") + " Accept: " + r.Header.Get("Accept")
	l.mu.Lock()
	l.seen[k]++
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1"},"items":[]}`, kind[0]+"List", kind[1])
		return
	}
	if q.Get("sendInitialEvents") == "true" {
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind[0], kind[1])
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// keys are the distinct requests seen, sorted.
func (l *requestLog) keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var k []string
	for key := range l.seen {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// watches counts the distinct WATCH requests seen.
func (l *requestLog) watches() int {
	n := 0
	for _, k := range l.keys() {
		if strings.Contains(k, "watch=true") {
			n++
		}
	}
	return n
}

// startFake starts a fake API server and writes a kubeconfig for it.
func startFake(t *testing.T) (*requestLog, string) {
	t.Helper()
	l := &requestLog{seen: map[string]int{}}
	// TLS and HTTP/2, as kube-apiserver: each client then holds one
	// connection and multiplexes its watches on it.
	srv := httptest.NewUnstartedServer(l)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return l, kc
}

// waitWatches waits until l saw n distinct WATCH requests, then a little
// longer for any more.
func waitWatches(t *testing.T, l *requestLog, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.watches() < n {
		if time.Now().After(deadline) {
			t.Fatalf("saw %d distinct watches, want %d:\n%s", l.watches(), n, strings.Join(l.keys(), "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
}

// runSim runs one simulated node of d against a fake until the test ends.
func runSim(t *testing.T, d Design) *requestLog {
	t.Helper()
	l, kc := startFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunSimWatchers(ctx, SimOptions{Kubeconfig: kc, Design: d, Nodes: 1}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunSimWatchers: %v", err)
		}
	})
	specs, _, err := DesignWatches(d, nodeName(0))
	if err != nil {
		t.Fatal(err)
	}
	waitWatches(t, l, len(specs))
	return l
}

func compareRequests(t *testing.T, what string, real, sim *requestLog) {
	t.Helper()
	r, s := real.keys(), sim.keys()
	if !slices.Equal(r, s) {
		t.Errorf("%s: the simulated node's requests differ from the real client's\nreal:\n%s\nsimulated:\n%s",
			what, strings.Join(r, "\n"), strings.Join(s, "\n"))
	}
	t.Logf("%s: %d distinct requests:\n%s", what, len(r), strings.Join(r, "\n"))
}

// The simulated kube-proxy sends what kube-proxy's informers
// (RunProxyWatch) send: paths, selectors, watch parameters and Accept.
func TestSimulatedKubeProxyRequests(t *testing.T) {
	real, kc := startFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunProxyWatch(ctx, kc, nodeName(0), "") }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunProxyWatch: %v", err)
		}
	}()
	waitWatches(t, real, 4)
	compareRequests(t, "kube-proxy", real, runSim(t, DesignKubeProxy))
}

// The simulated CoreDNS and nodedns nodes send what nodedns-backend sends
// with the kubeadm stanza of the stock kubernetes plugin and with the
// production nodedns_kubernetes stanza.
func TestSimulatedBackendRequests(t *testing.T) {
	bin := os.Getenv("NODEDNS_BACKEND_BIN")
	if bin == "" {
		bin = "../bin/nodedns-backend"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no backend binary (%v): run `make build` or set NODEDNS_BACKEND_BIN", err)
	}
	// The process starts in a directory of its own.
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		design Design
		mode   string
	}{{DesignCoreDNS, stockMode}, {DesignNodedns, "spec"}} {
		t.Run(string(tc.design), func(t *testing.T) {
			real, kc := startFake(t)
			dir := t.TempDir()
			mode := tc.mode
			// The study's backends run with client-go's default
			// (streaming lists on), as the simulator does.
			watchList := true
			f := backendFleet(dir, bin, kc, &watchList, &mode)
			a, err := f.start(0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.proc.Stop()
			specs, _, err := DesignWatches(tc.design, nodeName(0))
			if err != nil {
				t.Fatal(err)
			}
			waitWatches(t, real, len(specs))
			compareRequests(t, string(tc.design), real, runSim(t, tc.design))
		})
	}
}

func TestDesignWatches(t *testing.T) {
	for _, d := range Designs {
		specs, cs, err := DesignWatches(d, "node-007")
		if err != nil {
			t.Fatal(err)
		}
		if cs.ContentType != protobuf {
			t.Errorf("%s: content type %q, want protobuf as the real client", d, cs.ContentType)
		}
		var res []string
		for _, s := range specs {
			res = append(res, s.Resource)
		}
		t.Logf("%s: %v", d, res)
	}
	if _, err := ParseDesign("coredns"); err == nil {
		t.Error("ParseDesign accepted an unknown design")
	}
	st := SimStatus{Synced: 3, Replaces: 12, Events: 99}
	got, err := ParseSimStatus(st.String())
	if err != nil || got != st {
		t.Errorf("status round trip: %+v, %v", got, err)
	}
	if _, err := ParseSimStatus("garbage"); err == nil {
		t.Error("ParseSimStatus accepted garbage")
	}
}

// The per-node table divides each design's cost over the no-agent window by
// the node count and by kube-proxy's; the figure is written.
func TestSimReport(t *testing.T) {
	win := func(n int, cpu, watchBytes, updates float64) Result {
		return Result{Nodes: n, Seconds: 10, APICPU: cpu, WatchBytes: watchBytes, ChurnUpdates: updates}
	}
	rep := &Report{Config: Config{Simulate: []int{100}}}
	rep.Sim = []SimRow{
		{Phase: PhaseIdle, Result: win(0, 1, 0, 0)},
		{Phase: PhaseChurn, Result: win(0, 1, 0, 10)},
		{Phase: PhaseRestart, Result: win(0, 2, 0, 10)},
	}
	// kube-proxy: 1 CPU-s over the baseline in each phase; CoreDNS twice
	// that; nodedns 1.1 times.
	for i, d := range Designs {
		f := []float64{1, 2, 1.1}[i]
		rep.Sim = append(rep.Sim,
			SimRow{Design: d, Phase: PhaseIdle, Result: win(100, 1+f, 0, 0)},
			SimRow{Design: d, Phase: PhaseChurn, Result: win(100, 1+f, f*1024*100*10, 10)},
			SimRow{Design: d, Phase: PhaseRestart, Result: win(100, 2+f, 0, 10)})
	}
	var b strings.Builder
	writeSimPerNode(&b, rep)
	out := b.String()
	for _, want := range []string{
		"| 100 | steady (no churn) | apiserver CPU, mcores per node | 1 | 2 | 2.00 | 1.1 | 1.10 |",
		"| 100 | endpoint churn | watch KiB per endpoint update per node | 1 | 2 | 2.00 | 1.1 | 1.10 |",
		"| 100 | API server restart | apiserver CPU s per node (relist) | 0.01 | 0.02 | 2.00 | 0.011 | 1.10 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("per-node table lacks %q:\n%s", want, out)
		}
	}
	// Calibration: per second over the no-agent churn window (10 s, no
	// watch bytes): 2 KiB/s real, 2.2 simulated.
	rep.SimCalibration = []CalRow{{Design: DesignKubeProxy, Nodes: 20,
		Real: win(20, 1, 2*1024*10, 10), Sim: win(20, 1, 2.2*1024*10, 11)}}
	b.Reset()
	writeSimCalibration(&b, rep)
	if want := "| kube-proxy | 20 | 0 / 0 | 0.0 / 0.0 | 2.0 / 2.2 | 1.10 |"; !strings.Contains(b.String(), want) {
		t.Errorf("calibration table lacks %q:\n%s", want, b.String())
	}

	png := filepath.Join(t.TempDir(), "sim.png")
	if err := WriteSimPlot(png, rep); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("figure: %v, %v", st, err)
	}
}
