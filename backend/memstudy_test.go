package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/loadtest/scenario"
	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
	"github.com/nodedns/nodedns/testbed"
)

var (
	memStudy         = flag.Bool("memstudy", false, "run TestMemoryStudy (the nodedns pod's memory against cluster size, beside node-cache and a CoreDNS replica; ~20 min)")
	memStudySizes    = flag.String("memstudy.sizes", "0,1000,5000,10000,20000", "cluster sizes in Services, ascending")
	memStudyEPs      = flag.Int("memstudy.endpoints", 5, "ready endpoints per Service (one EndpointSlice each)")
	memStudyHeadless = flag.Int("memstudy.headless-every", 10, "every Nth Service is headless (10: 10%)")
	memStudyLimit    = flag.String("memstudy.gomemlimit", "256MiB", "GOMEMLIMIT of the backends: the chart's backend memory limit, which the chart passes as GOMEMLIMIT")
	memStudyExtra    = flag.String("memstudy.extra", "GOGC=100", "environment (NAME=VALUE, space-separated) of a third backend (spec) measured beside the chart's; empty: none")
	memStudyExtraBin = flag.String("memstudy.extra-bin", "", "binary of the third backend (say the previous commit's); default: the same as the chart's")
	memStudyOut      = flag.String("memstudy.out", "", "also write the tables to this file")
)

// memFill is the most names the study asks each cache for per size: the
// frontend's and node-cache's caches then hold as many answers as the
// 10,000 of the frontend's own RSS target.
const memFill = 10000

// memQPS lets the study write 20,000 Services and their slices as fast as
// one API server takes them.
const memQPS = 5000

// TestMemoryStudy measures the memory of every process of a nodedns pod
// (frontend, socket holder, backend) against cluster size, beside the
// backend watching every EndpointSlice, a stock CoreDNS replica with
// kubeadm's Corefile, and node-cache (NodeLocal DNSCache) in front of it,
// all on one testbed cluster. `make memstudy` runs it with the built
// binaries:
//
//	make memstudy
//	# = NODEDNS_BACKEND_BIN=bin/nodedns-backend NODEDNS_FRONTEND_BIN=bin/nodedns-frontend \
//	#   NODEDNS_NODE_CACHE_BIN=... NODEDNS_COREDNS_BIN=... \
//	#   go test ./backend -run 'TestMemoryStudy$' -memstudy -v -timeout 60m
func TestMemoryStudy(t *testing.T) {
	if !*memStudy {
		t.Skip("memory study: pass -memstudy")
	}
	var sizes []int
	for _, s := range strings.Split(*memStudySizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("-memstudy.sizes: %v", err)
		}
		sizes = append(sizes, n)
	}
	for _, env := range []string{"NODEDNS_BACKEND_BIN", "NODEDNS_FRONTEND_BIN", "NODEDNS_NODE_CACHE_BIN", "NODEDNS_COREDNS_BIN"} {
		if os.Getenv(env) == "" {
			t.Fatalf("%s unset: the study measures the shipped binaries (make memstudy sets it)", env)
		}
	}
	s := runMemStudy(t, memStudyConfig{
		sizes: sizes, endpoints: *memStudyEPs, headlessEvery: *memStudyHeadless,
		gomemlimit: *memStudyLimit, settle: 10 * time.Second, peers: true, extra: *memStudyExtra, extraBin: *memStudyExtraBin,
	})
	out := s.report()
	fmt.Print(out)
	if *memStudyOut != "" {
		if err := os.WriteFile(*memStudyOut, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println(s.summary())
}

// TestMemoryStudySmoke runs the study's code at a tiny size, so that it
// cannot rot between the runs that give the figures: every process is
// measured, the spec watch holds fewer slices than the full one, and the
// summary line has its shape. node-cache and the stock CoreDNS join when
// their binaries are given (NODEDNS_NODE_CACHE_BIN, NODEDNS_COREDNS_BIN).
func TestMemoryStudySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test: -short")
	}
	s := runMemStudy(t, memStudyConfig{
		sizes: []int{0, 40}, endpoints: 5, headlessEvery: 10, gomemlimit: "160MiB",
		settle: 500 * time.Millisecond,
		peers:  os.Getenv("NODEDNS_NODE_CACHE_BIN") != "" && os.Getenv("NODEDNS_COREDNS_BIN") != "",
	})
	want := []string{memFrontend, memHolder, memSpec, memAll}
	if s.cfg.peers {
		want = append(want, memCoreDNS, memNodeCache)
	}
	for _, state := range []string{"40 Services", memRelist, memFresh} {
		for _, p := range want {
			m, ok := s.get(state, p)
			if !ok {
				t.Errorf("%s: %s not measured", state, p)
				continue
			}
			if m.rss <= 0 || m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.rss+0.1 || m.hwm < m.rss-0.1 {
				t.Errorf("%s, %s: implausible %+v", state, p, m)
			}
			if p != memHolder && m.heap <= 0 {
				t.Errorf("%s, %s: no Go heap figure", state, p)
			}
		}
	}
	// With the spec watch the backend holds the 4 headless Services'
	// slices; with all, the 40. The kubernetes plugin's store sizes are
	// not exported, so the test checks what DNS shows: a ClusterIP
	// Service's endpoint has a PTR only with all.
	rev, _ := dns.ReverseAddr(testbed.ServiceEndpointIP(39, 4, 5).String())
	for _, tc := range []struct {
		b    *backend
		want int
	}{{s.spec, dns.RcodeNameError}, {s.all, dns.RcodeSuccess}} {
		r, _, err := (&dns.Client{Net: "tcp"}).Exchange(dnstest.Query(rev, dns.TypePTR), tc.b.DNS)
		if err != nil || r.Rcode != tc.want {
			t.Errorf("PTR of a ClusterIP Service's endpoint from %s: %v %v, want rcode %s", tc.b.DNS, r, err, dns.RcodeToString[tc.want])
		}
	}
	line := s.summary()
	if !strings.HasPrefix(line, "memstudy: 40 Services: pod steady ") || !strings.Contains(line, "relist peak") {
		t.Errorf("summary line %q", line)
	}
	t.Log("\n" + s.report())
}

// memStudyConfig is one run of the study.
type memStudyConfig struct {
	sizes         []int
	endpoints     int
	headlessEvery int
	gomemlimit    string
	settle        time.Duration // between a state's last change and its measurement
	peers         bool          // node-cache and the stock CoreDNS replica too
	extra         string        // environment of a third backend (spec); "" for none
	extraBin      string        // its binary; "" for the chart's
}

// The processes measured.
const (
	memFrontend  = "nodedns-frontend"
	memHolder    = "holder (frontend hold)"
	memSpec      = "nodedns-backend (endpointslices spec, GOGC=" + memChartGOGC + ")"
	memAll       = "nodedns-backend (endpointslices all, GOGC=" + memChartGOGC + ")"
	memCoreDNS   = "CoreDNS replica (stock, kubeadm Corefile)"
	memNodeCache = "node-cache (NodeLocal DNSCache)"
)

// memChartGOGC is the GOGC the chart gives the backend
// (helm/nodedns/templates/_backend.tpl).
const memChartGOGC = "50"

// The states after the sizes.
const (
	memRelist = "relist after API server restart"
	memFresh  = "fresh start on the full cluster"
)

// memSample is one process's memory in one state, in MiB.
type memSample struct {
	rss, anon, file, hwm, heap float64
}

// memProc is a measured process.
type memProc struct {
	name    string
	pid     func() int
	metrics func() string // host:port of /metrics with go_memstats_*, "" if none
}

// memRun is the study's state.
type memRun struct {
	cfg       memStudyConfig
	tb        *testbed.Testbed
	spec, all *backend
	extra     *backend // spec with cfg.extra; nil without
	coredns   *backend
	procs     []memProc
	states    []string
	services  map[string]int
	samples   map[string]map[string]memSample
	mu        sync.Mutex
	largest   string
	createdIn map[string]time.Duration
}

func (s *memRun) get(state, proc string) (memSample, bool) {
	m, ok := s.samples[state][proc]
	return m, ok
}

const memNS = "mem"

func runMemStudy(t *testing.T, cfg memStudyConfig) *memRun {
	t.Helper()
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	rc := tb.RestConfig()
	rc.QPS, rc.Burst = memQPS, 2*memQPS
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := testbed.EnsureNamespace(ctx, client, memNS); err != nil {
		t.Fatal(err)
	}
	s := &memRun{cfg: cfg, tb: tb, samples: map[string]map[string]memSample{}, services: map[string]int{}, createdIn: map[string]time.Duration{}}
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	limit := "GOMEMLIMIT=" + cfg.gomemlimit
	gogc := "GOGC=" + memChartGOGC
	s.spec = memBackend(t, clusterCorefile(t, tb.Kubeconfig), "NODEDNS_UPSTREAM="+up.Addr, limit, gogc, "NODEDNS_ENDPOINTSLICES=spec")
	s.all = memBackend(t, clusterCorefile(t, tb.Kubeconfig), "NODEDNS_UPSTREAM="+up.Addr, limit, gogc, "NODEDNS_ENDPOINTSLICES=all")
	fe, feMetrics, holder := startPodFrontend(t, s.spec, limit)
	s.procs = []memProc{
		{memFrontend, fe.pid, func() string { return feMetrics }},
		{memHolder, holder.pid, func() string { return "" }},
		{memSpec, func() int { return s.spec.proc.Cmd.Process.Pid }, func() string { return s.spec.Metrics }},
		{memAll, func() int { return s.all.proc.Cmd.Process.Pid }, func() string { return s.all.Metrics }},
	}
	if cfg.extra != "" {
		// The chart's environment first, so that the variant's wins.
		env := append([]string{"NODEDNS_UPSTREAM=" + up.Addr, limit, gogc, "NODEDNS_ENDPOINTSLICES=spec"}, strings.Fields(cfg.extra)...)
		s.extra = memBackendBin(t, cfg.extraBin, clusterCorefile(t, tb.Kubeconfig), env...)
		label := "nodedns-backend (endpointslices spec, " + cfg.extra + ")"
		if cfg.extraBin != "" {
			label = "nodedns-backend " + filepath.Base(cfg.extraBin) + " (endpointslices spec, " + cfg.extra + ")"
		}
		s.procs = append(s.procs, memProc{label, func() int { return s.extra.proc.Cmd.Process.Pid }, func() string { return s.extra.Metrics }})
	}
	var nodeCache string
	if cfg.peers {
		s.coredns = startStockCoreDNS(t, tb.Kubeconfig, up.Addr)
		nc, ncDNS := startNodeCache(t, s.coredns.DNS, up.Addr)
		nodeCache = ncDNS
		s.procs = append(s.procs,
			memProc{memCoreDNS, func() int { return s.coredns.proc.Cmd.Process.Pid }, func() string { return s.coredns.Metrics }},
			memProc{memNodeCache, nc.pid, func() string { return nc.metrics }})
	}
	fill := func(n int) {
		n = min(n, memFill)
		fillCache(t, fe.dns, n)
		if nodeCache != "" {
			fillCache(t, nodeCache, n)
		}
	}

	have := 0
	for _, n := range cfg.sizes {
		start := time.Now()
		if err := createStudyServices(ctx, client, memNS, have, n, cfg.endpoints, cfg.headlessEvery); err != nil {
			t.Fatalf("create Services %d..%d: %v", have, n, err)
		}
		state := fmt.Sprintf("%d Services", n)
		s.createdIn[state] = time.Since(start)
		have = n
		s.waitSynced(t, have)
		fill(have)
		time.Sleep(cfg.settle)
		s.measure(t, state, have)
		s.largest = state
	}

	// The API server restarts: every informer lists again while the old
	// objects are still referenced. The peak RSS is reset first, so VmHWM
	// afterwards is the relist's own peak.
	for _, p := range s.procs {
		if err := resetPeakRSS(p.pid()); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := tb.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	// A Service created after the restart shows that the watches resumed.
	if err := createStudyServices(ctx, client, memNS, have, have+1, cfg.endpoints, cfg.headlessEvery); err != nil {
		t.Fatal(err)
	}
	have++
	s.waitSynced(t, have)
	s.createdIn[memRelist] = time.Since(start)
	time.Sleep(cfg.settle)
	s.measure(t, memRelist, have)

	// Backends started now list everything at once, as a restarted pod
	// does. The frontend stays: it reconnects to the new backend.
	start = time.Now()
	s.spec.restart(t)
	s.all.restart(t)
	if s.extra != nil {
		s.extra.restart(t)
	}
	if s.coredns != nil {
		s.coredns.restart(t)
	}
	s.waitSynced(t, have)
	s.createdIn[memFresh] = time.Since(start)
	fill(have)
	time.Sleep(cfg.settle)
	s.measure(t, memFresh, have)
	return s
}

// waitSynced waits until every watching process answers for the last
// Service (n-1), the last headless one, and, when it holds every slice,
// the PTR of the last ClusterIP Service's last endpoint.
func (s *memRun) waitSynced(t *testing.T, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	last := n - 1
	headless, clusterIP := -1, -1
	for i := last; i >= 0 && (headless < 0 || clusterIP < 0); i-- {
		if memHeadless(i, s.cfg.headlessEvery) {
			headless = max(headless, i)
		} else {
			clusterIP = max(clusterIP, i)
		}
	}
	watchers := []struct {
		b   *backend
		all bool
	}{{s.spec, false}, {s.all, true}}
	if s.extra != nil {
		watchers = append(watchers, struct {
			b   *backend
			all bool
		}{s.extra, false})
	}
	if s.coredns != nil {
		watchers = append(watchers, struct {
			b   *backend
			all bool
		}{s.coredns, true})
	}
	var g errgroup.Group
	for _, w := range watchers {
		g.Go(func() error {
			name := func(i int) string { return fmt.Sprintf("svc-%d.%s.svc.cluster.local.", i, memNS) }
			if err := waitAnswer(w.b.DNS, name(last), dns.TypeA, ""); err != nil {
				return err
			}
			if headless >= 0 {
				want := testbed.ServiceEndpointIP(headless, s.cfg.endpoints-1, s.cfg.endpoints).String()
				if err := waitAnswer(w.b.DNS, name(headless), dns.TypeA, want); err != nil {
					return err
				}
			}
			if w.all && clusterIP >= 0 {
				rev, _ := dns.ReverseAddr(testbed.ServiceEndpointIP(clusterIP, s.cfg.endpoints-1, s.cfg.endpoints).String())
				if err := waitAnswer(w.b.DNS, rev, dns.TypePTR, name(clusterIP)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// waitAnswer waits up to 10 minutes until addr answers name/qtype with
// NOERROR and an answer containing want.
func waitAnswer(addr, name string, qtype uint16, want string) error {
	deadline := time.Now().Add(10 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		r, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(dnstest.Query(name, qtype), addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			for _, rr := range r.Answer {
				if strings.Contains(rr.String(), want) {
					return nil
				}
			}
		}
		last = fmt.Sprint(r, err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s does not answer %s %s with %q after 10m; last: %s", addr, name, dns.TypeToString[qtype], want, last)
}

// fillCache asks addr (UDP) for the A records of Services 0..n-1, 16 at a
// time, so that the cache in front holds n answers.
func fillCache(t *testing.T, addr string, n int) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(16)
	var failed atomic.Int64
	for i := range n {
		g.Go(func() error {
			q := dnstest.Query(fmt.Sprintf("svc-%d.%s.svc.cluster.local.", i, memNS), dns.TypeA)
			if r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, addr); err != nil || r.Rcode != dns.RcodeSuccess {
				failed.Add(1)
			}
			return nil
		})
	}
	_ = g.Wait()
	if f := failed.Load(); f > int64(n/100) {
		t.Fatalf("fill %s: %d of %d queries failed", addr, f, n)
	}
}

// measure records every process's memory in state.
func (s *memRun) measure(t *testing.T, state string, services int) {
	t.Helper()
	s.states = append(s.states, state)
	s.services[state] = services
	s.samples[state] = map[string]memSample{}
	for _, p := range s.procs {
		m, err := readMemory(p.pid())
		if err != nil {
			t.Fatal(err)
		}
		if addr := p.metrics(); addr != "" {
			_, text, err := httpGet("http://" + addr + "/metrics")
			if err != nil {
				t.Fatalf("%s /metrics: %v", p.name, err)
			}
			v, _ := metricValue(text, "go_memstats_heap_inuse_bytes")
			heap, _ := strconv.ParseFloat(v, 64)
			m.heap = heap / (1 << 20)
		}
		s.samples[state][p.name] = m
		t.Logf("%s, %s: rss=%.1f anon=%.1f file=%.1f hwm=%.1f heap=%.1f MiB", state, p.name, m.rss, m.anon, m.file, m.hwm, m.heap)
	}
}

// readMemory reads VmRSS, RssAnon, RssFile and VmHWM of pid.
func readMemory(pid int) (memSample, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSample{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	var m memSample
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.rss = kb / 1024
		case "RssAnon:":
			m.anon = kb / 1024
		case "RssFile:":
			m.file = kb / 1024
		case "VmHWM:":
			m.hwm = kb / 1024
		}
	}
	return m, nil
}

// resetPeakRSS resets VmHWM of pid to its RSS (proc(5), clear_refs 5).
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS of pid %d: %w", pid, err)
	}
	return nil
}

// memBackend starts a backend with corefile and env and keeps both for
// restart.
func memBackend(t *testing.T, corefile string, env ...string) *backend {
	t.Helper()
	return memBackendBin(t, "", corefile, env...)
}

// memBackendBin is memBackend running bin ("" for nodedns-backend).
func memBackendBin(t *testing.T, bin, corefile string, env ...string) *backend {
	t.Helper()
	b, ports := backendPorts(t)
	b.bin = bin
	b.corefile, b.extraEnv = corefile, append(ports, env...)
	b.start(t, b.corefile, b.extraEnv, 10*time.Minute)
	return b
}

// restart stops b and starts it again on the same addresses, and waits
// until it is ready (its initial list done).
func (b *backend) restart(t *testing.T) {
	t.Helper()
	b.stop()
	b.start(t, b.corefile, b.extraEnv, 10*time.Minute)
}

// memProcess is a started process other than a backend.
type memProcess struct {
	p       *proctest.Process
	dns     string
	metrics string // host:port of its /metrics, "" if none
}

func (m *memProcess) pid() int { return m.p.Cmd.Process.Pid }

// startPodFrontend runs the frontend on loopback in front of b, with its
// socket holder, as the chart's pod runs them (without the node's
// network), and waits until it is ready.
func startPodFrontend(t *testing.T, b *backend, gomemlimit string) (fe *memProcess, metrics string, holder *memProcess) {
	t.Helper()
	bin := os.Getenv("NODEDNS_FRONTEND_BIN")
	if bin == "" {
		bin = proctest.Build(t, "github.com/nodedns/nodedns/frontend", "nodedns-frontend")
	}
	dir := t.TempDir()
	hold := exec.Command(bin, "hold", "--holder-dir="+dir, "--hold-timeout=30s")
	holder = &memProcess{p: proctest.Start(t, "holder", hold)}
	dnsAddr, health := dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	metrics = dnstest.FreeAddr(t)
	cmd := exec.Command(bin,
		"--listen="+dnsAddr,
		"--backend="+b.DNS,
		"--setup-network=false",
		"--metrics="+metrics,
		"--health="+health,
		"--backend-ready-url=http://"+b.Ready+"/ready",
		"--holder-dir="+dir,
	)
	// The chart sets GOMEMLIMIT of each container from its memory limit.
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+strings.TrimPrefix(gomemlimit, "GOMEMLIMIT="))
	fe = &memProcess{p: proctest.Start(t, "nodedns-frontend", cmd), dns: dnsAddr}
	if err := waitHTTP(fe.p, "http://"+health+"/ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return fe, metrics, holder
}

// waitHTTP waits until url answers 200 while p runs.
func waitHTTP(p *proctest.Process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited: %v\n%s", p.Cmd.Path, p.Err(), p.Output.String())
		default:
		}
		if code, _, err := httpGet(url); err == nil && code == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not 200 after %v\n%s", url, timeout, p.Output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startStockCoreDNS runs CoreDNS built from its own module
// ($NODEDNS_COREDNS_BIN, every plugin of its plugin.cfg) with the Corefile
// kubeadm writes, pointed at kubeconfig, on free loopback ports, forwarding
// to upstream; as a replica of the cluster's CoreDNS Deployment it runs
// without GOMEMLIMIT (kubeadm's manifest sets none).
func startStockCoreDNS(t *testing.T, kubeconfig, upstream string) *backend {
	t.Helper()
	b, _ := backendPorts(t)
	core := testbed.KubeadmCorefile
	for _, r := range [][2]string{
		{".:53 {", ".:" + strconv.Itoa(portOf(t, b.DNS)) + " {\n    bind 127.0.0.1"},
		{"    health {", "    health " + b.Health + " {"},
		{"    ready\n", "    ready " + b.Ready + "\n"},
		{"       pods insecure\n", "       kubeconfig " + kubeconfig + "\n       pods insecure\n"},
		{"prometheus :9153", "prometheus " + b.Metrics},
		{"forward . /etc/resolv.conf", "forward . " + upstream},
	} {
		if !strings.Contains(core, r[0]) {
			t.Fatalf("kubeadm Corefile has no %q", r[0])
		}
		core = strings.Replace(core, r[0], r[1], 1)
	}
	// The second listener of the nodedns helpers is not in this Corefile;
	// waitReady checks it, so point it at the DNS port.
	b.Fallback = b.DNS
	b.corefile = core
	b.bin = os.Getenv("NODEDNS_COREDNS_BIN")
	b.start(t, core, nil, 10*time.Minute)
	return b
}

// startNodeCache runs node-cache (NodeLocal DNSCache) on loopback with the
// Corefile of its DaemonSet (cluster zones to clusterDNS over TCP, the
// rest to upstream), without its interface and iptables setup.
func startNodeCache(t *testing.T, clusterDNS, upstream string) (*memProcess, string) {
	t.Helper()
	bin := os.Getenv("NODEDNS_NODE_CACHE_BIN")
	dnsAddr, health, metrics := dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	_, port, _ := strings.Cut(dnsAddr, ":")
	p, _ := strconv.Atoi(port)
	core := scenario.NodeLocalCorefile(scenario.NodeLocal{
		Bind: []string{"127.0.0.1"}, Port: p, ClusterDNS: clusterDNS, Upstream: upstream,
		Health: health, Metrics: metrics,
	})
	dir := t.TempDir()
	base := filepath.Join(dir, "Corefile.base")
	if err := os.WriteFile(base, []byte(core), 0o644); err != nil {
		t.Fatal(err)
	}
	_, hport, _ := strings.Cut(health, ":")
	cmd := exec.Command(bin,
		"-localip=127.0.0.1", "-setupinterface=false", "-setupiptables=false",
		"-basecorefile="+base, "-conf="+filepath.Join(dir, "Corefile"),
		"-dns.port="+port, "-health-port="+hport,
		"-metrics-listen-address="+dnstest.FreeAddr(t),
	)
	nc := &memProcess{p: proctest.Start(t, "node-cache", cmd), dns: dnsAddr, metrics: metrics}
	if err := waitHTTP(nc.p, "http://"+health+"/health", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return nc, dnsAddr
}

// pod is the nodedns pod's RSS in state: frontend + backend (spec) +
// the holder's anon RSS. The holder runs the frontend's binary, whose
// file pages the two share (one page cache, charged once), so only its
// anon pages add.
func (s *memRun) pod(state string) float64 {
	fe, _ := s.get(state, memFrontend)
	h, _ := s.get(state, memHolder)
	b, _ := s.get(state, memSpec)
	return fe.rss + h.anon + b.rss
}

// summary is the study's last line, for the largest size.
func (s *memRun) summary() string {
	n := s.services[s.largest]
	steady := s.pod(s.largest)
	// The relist peak: the backend's peak with the others' RSS.
	peak := s.pod(memRelist)
	if b, ok := s.get(memRelist, memSpec); ok {
		peak += b.hwm - b.rss
	}
	nc := "not measured"
	if m, ok := s.get(s.largest, memNodeCache); ok {
		nc = fmt.Sprintf("%.1f MiB", m.rss)
	}
	return fmt.Sprintf("memstudy: %d Services: pod steady %.1f MiB, relist peak %.1f MiB; node-cache %s", n, steady, peak, nc)
}

// report is the study's tables in Markdown.
func (s *memRun) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nGOMEMLIMIT of the nodedns containers: %s; %d endpoints per Service, every %dth Service headless\n\n", s.cfg.gomemlimit, s.cfg.endpoints, s.cfg.headlessEvery)
	fmt.Fprintf(&b, "| state | process | Services | RSS MiB | anon MiB | file MiB | peak RSS MiB | Go heap MiB |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range s.states {
		for _, p := range s.procs {
			m, ok := s.get(st, p.name)
			if !ok {
				continue
			}
			heap := "—"
			if m.heap > 0 {
				heap = fmt.Sprintf("%.1f", m.heap)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %s |\n", st, p.name, s.services[st], m.rss, m.anon, m.file, m.hwm, heap)
		}
	}
	fmt.Fprintf(&b, "\n| state | nodedns pod RSS MiB (frontend + backend spec + holder anon) | backend peak MiB | NodeLocal DNSCache node-cache MiB | CoreDNS replica MiB | pod / node-cache | took |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range s.states {
		pod := s.pod(st)
		be, _ := s.get(st, memSpec)
		nc, ncOK := s.get(st, memNodeCache)
		cd, _ := s.get(st, memCoreDNS)
		ratio := "—"
		if ncOK && nc.rss > 0 {
			ratio = fmt.Sprintf("%.2f", pod/nc.rss)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", st, pod, be.hwm, nc.rss, cd.rss, ratio, s.createdIn[st].Round(time.Second))
	}
	return b.String()
}
