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
	memStudy         = flag.Bool("memstudy", false, "run TestMemoryStudy (the nodedns pod's memory against cluster size, beside node-cache and a CoreDNS replica; ~40 min)")
	memStudySizes    = flag.String("memstudy.sizes", "0,1000,10000,20000", "cluster sizes in Services, ascending")
	memStudyCPUs     = flag.String("memstudy.cpus", "2,16,64", "CPU counts of the nodes measured: each gets its own pod and node-cache, with GOMAXPROCS (and so the frontend's sockets) as there")
	memStudySettle   = flag.Duration("memstudy.settle", 3*time.Minute, "wait between a state's last change and its measurement: past the Go runtime's forced collection (every 2 minutes) and most of its scavenger's return of the freed pages")
	memStudyPressure = flag.Bool("memstudy.pressure", true, "after the largest size, limit the first node's containers to about their working set and measure again")
	memStudyQuick    = flag.Bool("memstudy.quick", false, "a quick run for development: 0 and 1,000 Services, 2 CPUs, 20 s settle (overrides those flags)")
	memStudyEPs      = flag.Int("memstudy.endpoints", 5, "ready endpoints per Service (one EndpointSlice each)")
	memStudyHeadless = flag.Int("memstudy.headless-every", 10, "every Nth Service is headless (10: 10%)")
	memStudyLimit    = flag.String("memstudy.gomemlimit", "256MiB", "GOMEMLIMIT of the backends: the chart's backend memory limit, which the chart passes as GOMEMLIMIT")
	memStudyExtra    = flag.String("memstudy.extra", "", "environment (NAME=VALUE, space-separated) of a further backend (spec, first CPU count) measured beside the chart's; it runs when this or -memstudy.extra-bin is set")
	memStudyExtraBin = flag.String("memstudy.extra-bin", "", "binary of that backend (say the previous commit's); default: the same as the chart's")
	memStudyOut      = flag.String("memstudy.out", "", "also write the tables to this file")
)

// memFill is the most names the study asks each cache for per size: the
// frontend's and node-cache's caches then hold as many answers as the
// 10,000 of the frontend's own RSS target.
const memFill = 10000

// memQPS lets the study write 20,000 Services and their slices as fast as
// one API server takes them.
const memQPS = 5000

// memNodes is the cluster size of the summary's NodeLocal DNSCache cost:
// node-cache on each node plus its share of the CoreDNS Deployment.
const memNodes = 1000

// deploymentReplicas is the CoreDNS Deployment's replica count on a
// cluster of nodes under the cluster-proportional autoscaler's default
// linear ladder for kube-dns (nodesPerReplica 16, at least 2).
func deploymentReplicas(nodes int) int { return max(2, (nodes+15)/16) }

// TestMemoryStudy measures the memory of every container of a nodedns pod
// (frontend, socket holder, backend) against cluster size, beside the
// backend watching every EndpointSlice, a stock CoreDNS replica with
// kubeadm's Corefile, and node-cache (NodeLocal DNSCache) in front of it,
// all on one testbed cluster, as kubelet measures containers: each
// process in a memory cgroup of its own, running its own copy of its
// binary. `make memstudy` runs it with the built binaries:
//
//	make memstudy
//	# = NODEDNS_BACKEND_BIN=bin/nodedns-backend NODEDNS_FRONTEND_BIN=bin/nodedns-frontend \
//	#   NODEDNS_NODE_CACHE_BIN=... NODEDNS_COREDNS_BIN=... \
//	#   go test ./backend -run 'TestMemoryStudy$' -memstudy -v -timeout 150m
func TestMemoryStudy(t *testing.T) {
	if !*memStudy {
		t.Skip("memory study: pass -memstudy")
	}
	sizes, cpus, settle := *memStudySizes, *memStudyCPUs, *memStudySettle
	if *memStudyQuick {
		sizes, cpus, settle = "0,1000", "2", 20*time.Second
	}
	for _, env := range []string{"NODEDNS_BACKEND_BIN", "NODEDNS_FRONTEND_BIN", "NODEDNS_NODE_CACHE_BIN", "NODEDNS_COREDNS_BIN"} {
		if os.Getenv(env) == "" {
			t.Fatalf("%s unset: the study measures the shipped binaries (make memstudy sets it)", env)
		}
	}
	s := runMemStudy(t, memStudyConfig{
		sizes: ints(t, sizes), cpus: ints(t, cpus), endpoints: *memStudyEPs, headlessEvery: *memStudyHeadless,
		gomemlimit: *memStudyLimit, settle: settle, peers: true, pressure: *memStudyPressure,
		extra: *memStudyExtra, extraBin: *memStudyExtraBin, cgroups: true,
	})
	out := s.report()
	fmt.Print(out)
	if *memStudyOut != "" {
		if err := os.WriteFile(*memStudyOut, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range s.summary() {
		fmt.Println(line)
	}
}

func ints(t *testing.T, list string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%q: %v", list, err)
		}
		out = append(out, n)
	}
	return out
}

// TestMemoryStudySmoke runs the study's code at a tiny size, so that it
// cannot rot between the runs that give the figures: every process is
// measured, the spec watch holds fewer slices than the full one, and the
// summary line has its shape. node-cache and the stock CoreDNS join when
// their binaries are given (NODEDNS_NODE_CACHE_BIN, NODEDNS_COREDNS_BIN);
// the cgroup figures when memory cgroups can be made (root).
func TestMemoryStudySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test: -short")
	}
	s := runMemStudy(t, memStudyConfig{
		sizes: []int{0, 40}, cpus: []int{2}, endpoints: 5, headlessEvery: 10, gomemlimit: "160MiB",
		settle: 500 * time.Millisecond, cgroups: true,
		peers: os.Getenv("NODEDNS_NODE_CACHE_BIN") != "" && os.Getenv("NODEDNS_COREDNS_BIN") != "",
	})
	want := []string{roleFrontend, roleHolder, roleSpec, roleAll}
	if s.cfg.peers {
		want = append(want, roleCoreDNS, roleNodeCache)
	}
	if s.cgRoot == "" {
		t.Logf("no cgroup figures: %v", s.cgErr)
	}
	for _, state := range []string{"40 Services", memRelist, memFresh} {
		for _, role := range want {
			m, ok := s.get(state, memName(role, 2))
			if !ok {
				t.Errorf("%s: %s not measured", state, role)
				continue
			}
			if m.rss <= 0 || m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.rss+0.1 || m.hwm < m.rss-0.1 {
				t.Errorf("%s, %s: implausible %+v", state, role, m)
			}
			if role != roleHolder && m.heap <= 0 {
				t.Errorf("%s, %s: no Go heap figure", state, role)
			}
			if s.cgRoot != "" && (m.cg.workingSet <= 0 || m.cg.usage < m.cg.workingSet || m.cg.anon <= 0) {
				t.Errorf("%s, %s: implausible cgroup figures %+v", state, role, m.cg)
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
	}{{s.nodes[0].spec, dns.RcodeNameError}, {s.all, dns.RcodeSuccess}} {
		r, _, err := (&dns.Client{Net: "tcp"}).Exchange(dnstest.Query(rev, dns.TypePTR), tc.b.DNS)
		if err != nil || r.Rcode != tc.want {
			t.Errorf("PTR of a ClusterIP Service's endpoint from %s: %v %v, want rcode %s", tc.b.DNS, r, err, dns.RcodeToString[tc.want])
		}
	}
	lines := s.summary()
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "memstudy: 40 Services, 2 CPUs: pod working set ") || !strings.Contains(lines[0], "; node-cache ") {
		t.Errorf("summary lines %q", lines)
	}
	t.Log("\n" + s.report())
}

// memStudyConfig is one run of the study.
type memStudyConfig struct {
	sizes         []int
	cpus          []int // one node (pod and node-cache) per count
	endpoints     int
	headlessEvery int
	gomemlimit    string
	settle        time.Duration // between a state's last change and its measurement
	peers         bool          // node-cache and the stock CoreDNS replica too
	pressure      bool          // measure the first node under a limit near its working set
	cgroups       bool          // each process in a memory cgroup of its own (when they can be made)
	extra         string        // environment of a further backend (spec)
	extraBin      string        // its binary; "" for the chart's
}

// The roles of the processes measured; memName adds the CPU count.
const (
	roleFrontend  = "nodedns-frontend"
	roleHolder    = "holder (frontend hold)"
	roleSpec      = "nodedns-backend (endpointslices spec, GOGC=" + memChartGOGC + ", GOMAXPROCS at most " + memChartProcs + ")"
	roleAll       = "nodedns-backend (endpointslices all, GOGC=" + memChartGOGC + ", GOMAXPROCS at most " + memChartProcs + ")"
	roleCoreDNS   = "CoreDNS replica (stock, kubeadm Corefile)"
	roleNodeCache = "node-cache (NodeLocal DNSCache)"
)

func memName(role string, cpus int) string { return fmt.Sprintf("%s, %d CPUs", role, cpus) }

// memChartGOGC is the GOGC the chart gives the backend
// (helm/nodedns/templates/_backend.tpl).
const memChartGOGC = "50"

// memChartProcs is the GOMAXPROCS the chart gives the backend
// (helm/nodedns/templates/_backend.tpl); a node with fewer CPUs has fewer.
const memChartProcs = "2"

// chartProcs is the backend's GOMAXPROCS on a node of cpus CPUs as the
// chart runs it.
func chartProcs(t *testing.T, cpus int) string {
	n, err := strconv.Atoi(memChartProcs)
	if err != nil {
		t.Fatal(err)
	}
	return "GOMAXPROCS=" + strconv.Itoa(min(cpus, n))
}

// The states after the sizes.
const (
	memPressure = "largest size, limit near the working set"
	memRelist   = "relist after API server restart"
	memFresh    = "fresh start on the full cluster"
)

// memSample is one process's memory in one state, in MiB: its
// /proc/PID/status figures, its Go heap and its cgroup's.
type memSample struct {
	rss, anon, file, hwm, heap float64
	cg                         cgMemory // zero without cgroups
}

// memProc is a measured process.
type memProc struct {
	name    string
	role    string
	cpus    int
	pid     func() int
	metrics func() string // host:port of /metrics with go_memstats_*, "" if none
	cg      *memCgroup    // nil without cgroups
}

// memNode is what one node of the study runs: a nodedns pod and node-cache.
type memNode struct {
	cpus      int
	spec      *backend
	fe        *memProcess
	nodeCache *memProcess // nil without peers
	cgs       []*memCgroup
}

// memRun is the study's state.
type memRun struct {
	cfg       memStudyConfig
	tb        *testbed.Testbed
	nodes     []*memNode
	all       *backend
	extra     *backend // nil without
	coredns   *backend
	procs     []memProc
	states    []string
	services  map[string]int
	samples   map[string]map[string]memSample
	largest   string
	createdIn map[string]time.Duration
	cgRoot    string // "" without cgroups
	cgV2      bool
	cgErr     error // why there are none
	limits    map[string]float64
	// queries that failed under pressure: frontend, node-cache
	pressureFailed, pressureFailedNC int
}

func (s *memRun) get(state, proc string) (memSample, bool) {
	m, ok := s.samples[state][proc]
	return m, ok
}

const memNS = "mem"

// cgroup returns a new memory cgroup for a process, or nil without them.
func (s *memRun) cgroup(t *testing.T, name string) *memCgroup {
	if s.cgRoot == "" {
		return nil
	}
	return newMemCgroup(t, s.cgRoot, s.cgV2, strings.NewReplacer(" ", "_", "/", "_", "(", "", ")", "", ",", "", "=", "").Replace(name))
}

// bin returns the binary a process runs: its own copy with cgroups.
func (s *memRun) bin(t *testing.T, bin string) string {
	if s.cgRoot == "" {
		return bin
	}
	return copyBinary(t, bin)
}

// add registers a process for measurement.
func (s *memRun) add(role string, cpus int, cg *memCgroup, pid func() int, metrics func() string) {
	s.procs = append(s.procs, memProc{name: memName(role, cpus), role: role, cpus: cpus, pid: pid, metrics: metrics, cg: cg})
}

// memBackendIn starts a backend of bin with corefile and env in a cgroup
// of its own.
func (s *memRun) memBackendIn(t *testing.T, role string, cpus int, bin, corefile string, env ...string) *backend {
	t.Helper()
	if bin == "" {
		bin = os.Getenv("NODEDNS_BACKEND_BIN")
	}
	if bin == "" {
		// The test binary runs the backend's main (TestMain).
		bin = os.Args[0]
		env = append(env, runBackendEnv+"=1")
	}
	cg := s.cgroup(t, memName(role, cpus))
	b, ports := backendPorts(t)
	b.bin = s.bin(t, bin)
	if cg != nil {
		b.wrap = cg.wrap
	}
	b.corefile, b.extraEnv = corefile, append(append(ports, "GOMAXPROCS="+strconv.Itoa(cpus)), env...)
	b.start(t, b.corefile, b.extraEnv, 10*time.Minute)
	s.add(role, cpus, cg, func() int { return b.proc.Cmd.Process.Pid }, func() string { return b.Metrics })
	return b
}

func runMemStudy(t *testing.T, cfg memStudyConfig) *memRun {
	t.Helper()
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 140*time.Minute)
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
	if cfg.cgroups {
		s.cgRoot, s.cgV2, s.cgErr = memCgroupRoot(t)
	} else {
		s.cgErr = fmt.Errorf("not asked for")
	}
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	limit := "GOMEMLIMIT=" + cfg.gomemlimit
	gogc := "GOGC=" + memChartGOGC
	first := cfg.cpus[0]
	if cfg.peers {
		// One replica of the Deployment; it runs on a node of the first
		// size, without a CPU limit, so GOMAXPROCS is that node's count.
		s.coredns = s.startStockCoreDNS(t, first, tb.Kubeconfig, up.Addr)
	}
	for _, c := range cfg.cpus {
		n := &memNode{cpus: c}
		n.spec = s.memBackendIn(t, roleSpec, c, "", clusterCorefile(t, tb.Kubeconfig), "NODEDNS_UPSTREAM="+up.Addr, limit, gogc, chartProcs(t, c), "NODEDNS_ENDPOINTSLICES=spec")
		n.fe = s.startPodFrontend(t, c, n.spec, limit)
		if cfg.peers {
			n.nodeCache = s.startNodeCache(t, c, s.coredns.DNS, up.Addr)
		}
		s.nodes = append(s.nodes, n)
	}
	s.all = s.memBackendIn(t, roleAll, first, "", clusterCorefile(t, tb.Kubeconfig), "NODEDNS_UPSTREAM="+up.Addr, limit, gogc, chartProcs(t, first), "NODEDNS_ENDPOINTSLICES=all")
	if cfg.extra != "" || cfg.extraBin != "" {
		// The chart's environment first, so that the variant's wins.
		env := append([]string{"NODEDNS_UPSTREAM=" + up.Addr, limit, gogc, chartProcs(t, first), "NODEDNS_ENDPOINTSLICES=spec"}, strings.Fields(cfg.extra)...)
		role := "nodedns-backend (endpointslices spec, " + cfg.extra + ")"
		if cfg.extraBin != "" {
			role = cfg.extraBin + " (endpointslices spec"
			if cfg.extra != "" {
				role += ", " + cfg.extra
			}
			role += ")"
		}
		s.extra = s.memBackendIn(t, role, first, cfg.extraBin, clusterCorefile(t, tb.Kubeconfig), env...)
	}
	fill := func(n int) {
		n = min(n, memFill)
		for _, node := range s.nodes {
			fillCache(t, node.fe.dns, n)
			if node.nodeCache != nil {
				fillCache(t, node.nodeCache.dns, n)
			}
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
	// objects are still referenced. The peaks are reset first, so the
	// peaks afterwards are the relist's own.
	for _, p := range s.procs {
		if err := resetPeakRSS(p.pid()); err != nil {
			t.Fatal(err)
		}
		if p.cg != nil {
			if err := p.cg.resetPeak(); err != nil {
				t.Fatal(err)
			}
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
	// does. The frontends stay: they reconnect to the new backends.
	start = time.Now()
	for _, n := range s.nodes {
		n.spec.restart(t)
	}
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

	// Last, so that a container the limit kills stops nothing after it.
	if cfg.pressure && s.cgRoot != "" {
		s.underPressure(t, have)
	}
	return s
}

// underPressure limits each container of the first node's pod, and its
// node-cache, to 10% above its working set (at least 4 MiB above), asks
// for every name again, waits and measures: the kernel then reclaims file
// pages to stay under the limit, so usage is what the container needs.
// What fails there (queries, OOM kills) is reported, not fatal: the
// working set leaves out inactive file pages a process may need again.
func (s *memRun) underPressure(t *testing.T, services int) {
	t.Helper()
	first := s.nodes[0]
	s.limits = map[string]float64{}
	for _, p := range s.procs {
		if p.cpus != first.cpus || p.cg == nil || (p.role != roleFrontend && p.role != roleHolder && p.role != roleSpec && p.role != roleNodeCache) {
			continue
		}
		m, err := p.cg.memory()
		if err != nil {
			t.Fatal(err)
		}
		mib := max(m.workingSet*1.1, m.workingSet+4)
		if err := p.cg.setLimit(int64(mib * (1 << 20))); err != nil {
			// The kernel refuses a limit it cannot reclaim down to.
			t.Logf("limit %s to %.1f MiB: %v; measured without a limit", p.name, mib, err)
			continue
		}
		s.limits[p.name] = mib
		t.Cleanup(func() { _ = p.cg.setLimit(0) })
	}
	start := time.Now()
	n := min(services, memFill)
	s.pressureFailed = askNames(first.fe.dns, n)
	if first.nodeCache != nil {
		s.pressureFailedNC = askNames(first.nodeCache.dns, n)
	}
	time.Sleep(s.cfg.settle)
	s.createdIn[memPressure] = time.Since(start)
	s.measure(t, memPressure, services)
	t.Logf("under pressure: %d of %d queries to the frontend failed, %d to node-cache", s.pressureFailed, n, s.pressureFailedNC)
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
	type watcher struct {
		b   *backend
		all bool
	}
	watchers := []watcher{{s.all, true}}
	for _, n := range s.nodes {
		watchers = append(watchers, watcher{n.spec, false})
	}
	if s.extra != nil {
		watchers = append(watchers, watcher{s.extra, false})
	}
	if s.coredns != nil {
		watchers = append(watchers, watcher{s.coredns, true})
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
	if f := askNames(addr, n); f > n/100 {
		t.Fatalf("fill %s: %d of %d queries failed", addr, f, n)
	}
}

// askNames asks addr for Services 0..n-1 and returns how many queries
// failed.
func askNames(addr string, n int) int {
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
	return int(failed.Load())
}

// measure records every process's memory in state.
func (s *memRun) measure(t *testing.T, state string, services int) {
	t.Helper()
	s.states = append(s.states, state)
	s.services[state] = services
	s.samples[state] = map[string]memSample{}
	for _, p := range s.procs {
		m, err := readMemory(p.pid())
		if err != nil && state == memPressure {
			// Killed under its limit: the cgroup still counts.
			t.Logf("%s: %v", p.name, err)
		} else if err != nil {
			t.Fatal(err)
		}
		if addr := p.metrics(); addr != "" && m.rss > 0 {
			_, text, err := httpGet("http://" + addr + "/metrics")
			if err != nil && state == memPressure {
				// A process thrashing under its limit may not answer.
				t.Logf("%s /metrics: %v", p.name, err)
			} else if err != nil {
				t.Fatalf("%s /metrics: %v", p.name, err)
			}
			v, _ := metricValue(text, "go_memstats_heap_inuse_bytes")
			heap, _ := strconv.ParseFloat(v, 64)
			m.heap = heap / (1 << 20)
		}
		if p.cg != nil {
			if m.cg, err = p.cg.memory(); err != nil {
				t.Fatalf("%s: cgroup: %v", p.name, err)
			}
		}
		s.samples[state][p.name] = m
		t.Logf("%s, %s: working set=%.1f usage=%.1f cgroup anon=%.1f file=%.1f peak=%.1f; rss=%.1f anon=%.1f file=%.1f hwm=%.1f heap=%.1f MiB",
			state, p.name, m.cg.workingSet, m.cg.usage, m.cg.anon, m.cg.file, m.cg.peak, m.rss, m.anon, m.file, m.hwm, m.heap)
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
// network) on a node of cpus CPUs, and waits until it is ready.
func (s *memRun) startPodFrontend(t *testing.T, cpus int, b *backend, gomemlimit string) *memProcess {
	t.Helper()
	bin := os.Getenv("NODEDNS_FRONTEND_BIN")
	if bin == "" {
		bin = proctest.Build(t, "github.com/nodedns/nodedns/frontend", "nodedns-frontend")
	}
	dir := t.TempDir()
	// The chart sets GOMEMLIMIT of each container from its memory limit.
	env := append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(cpus), "GOMEMLIMIT="+strings.TrimPrefix(gomemlimit, "GOMEMLIMIT="))
	hcg := s.cgroup(t, memName(roleHolder, cpus))
	hold := exec.Command(s.bin(t, bin), "hold", "--holder-dir="+dir, "--hold-timeout=30s")
	hold.Env = env
	if hcg != nil {
		hold = hcg.wrap(hold)
	}
	holder := &memProcess{p: proctest.Start(t, "holder", hold)}
	s.add(roleHolder, cpus, hcg, holder.pid, func() string { return "" })

	dnsAddr, health, metrics := dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	fcg := s.cgroup(t, memName(roleFrontend, cpus))
	cmd := exec.Command(s.bin(t, bin),
		"--listen="+dnsAddr,
		"--backend="+b.DNS,
		"--setup-network=false",
		"--metrics="+metrics,
		"--health="+health,
		"--backend-ready-url=http://"+b.Ready+"/ready",
		"--holder-dir="+dir,
	)
	cmd.Env = env
	if fcg != nil {
		cmd = fcg.wrap(cmd)
	}
	fe := &memProcess{p: proctest.Start(t, "nodedns-frontend", cmd), dns: dnsAddr, metrics: metrics}
	if err := waitHTTP(fe.p, "http://"+health+"/ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.add(roleFrontend, cpus, fcg, fe.pid, func() string { return metrics })
	return fe
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
func (s *memRun) startStockCoreDNS(t *testing.T, cpus int, kubeconfig, upstream string) *backend {
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
	b.bin = s.bin(t, os.Getenv("NODEDNS_COREDNS_BIN"))
	cg := s.cgroup(t, memName(roleCoreDNS, cpus))
	if cg != nil {
		b.wrap = cg.wrap
	}
	b.extraEnv = []string{"GOMAXPROCS=" + strconv.Itoa(cpus)}
	b.start(t, core, b.extraEnv, 10*time.Minute)
	s.add(roleCoreDNS, cpus, cg, func() int { return b.proc.Cmd.Process.Pid }, func() string { return b.Metrics })
	return b
}

// startNodeCache runs node-cache (NodeLocal DNSCache) on loopback with the
// Corefile of its DaemonSet (cluster zones to clusterDNS over TCP, the
// rest to upstream), without its interface and iptables setup.
func (s *memRun) startNodeCache(t *testing.T, cpus int, clusterDNS, upstream string) *memProcess {
	t.Helper()
	bin := s.bin(t, os.Getenv("NODEDNS_NODE_CACHE_BIN"))
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
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(cpus))
	cg := s.cgroup(t, memName(roleNodeCache, cpus))
	if cg != nil {
		cmd = cg.wrap(cmd)
	}
	nc := &memProcess{p: proctest.Start(t, "node-cache", cmd), dns: dnsAddr, metrics: metrics}
	if err := waitHTTP(nc.p, "http://"+health+"/health", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.add(roleNodeCache, cpus, cg, nc.pid, func() string { return metrics })
	return nc
}

// podMemory is a pod's (or a peer's) memory in one state, in MiB.
type podMemory struct{ workingSet, rss float64 }

// pod is the nodedns pod's memory in state on the node of cpus CPUs:
// frontend + holder + backend (spec), each container's working set and
// each process's RSS (every process runs its own copy of its binary, so
// no file page is counted twice).
func (s *memRun) pod(state string, cpus int) podMemory {
	var m podMemory
	for _, role := range []string{roleFrontend, roleHolder, roleSpec} {
		p, _ := s.get(state, memName(role, cpus))
		m.workingSet += p.cg.workingSet
		m.rss += p.rss
	}
	return m
}

func (s *memRun) peer(state, role string, cpus int) (podMemory, bool) {
	p, ok := s.get(state, memName(role, cpus))
	return podMemory{p.cg.workingSet, p.rss}, ok
}

// nodeLocal is NodeLocal DNSCache's cost per node at memNodes nodes:
// node-cache on the node plus its share of the CoreDNS Deployment.
func (s *memRun) nodeLocal(state string, cpus int) (podMemory, bool) {
	nc, ok := s.peer(state, roleNodeCache, cpus)
	cd, ok2 := s.peer(state, roleCoreDNS, s.cfg.cpus[0])
	if !ok || !ok2 {
		return podMemory{}, false
	}
	share := float64(deploymentReplicas(memNodes)) / memNodes
	return podMemory{nc.workingSet + share*cd.workingSet, nc.rss + share*cd.rss}, true
}

// summary is the study's last lines, one per CPU count, for the largest
// size.
func (s *memRun) summary() []string {
	var out []string
	n := s.services[s.largest]
	for _, c := range s.cfg.cpus {
		pod := s.pod(s.largest, c)
		nc := "not measured"
		if m, ok := s.peer(s.largest, roleNodeCache, c); ok {
			nc = fmt.Sprintf("%.1f MiB (RSS %.1f)", m.workingSet, m.rss)
		}
		nl := "not measured"
		if m, ok := s.nodeLocal(s.largest, c); ok {
			nl = fmt.Sprintf("%.1f MiB", m.workingSet)
		}
		out = append(out, fmt.Sprintf("memstudy: %d Services, %d CPUs: pod working set %.1f MiB (RSS %.1f); node-cache %s; NodeLocal per node with its Deployment share at 1,000 nodes %s",
			n, c, pod.workingSet, pod.rss, nc, nl))
	}
	return out
}

// report is the study's tables in Markdown.
func (s *memRun) report() string {
	var b strings.Builder
	cg := "each process in a memory cgroup of its own (cgroup v1), its own copy of its binary"
	if s.cgV2 {
		cg = "each process in a memory cgroup of its own (cgroup v2), its own copy of its binary"
	}
	if s.cgRoot == "" {
		cg = fmt.Sprintf("no cgroups (%v): working sets read 0", s.cgErr)
	}
	fmt.Fprintf(&b, "\nGOMEMLIMIT of the nodedns containers: %s; %d endpoints per Service, every %dth Service headless; %s; measured %v after each state's last change\n\n",
		s.cfg.gomemlimit, s.cfg.endpoints, s.cfg.headlessEvery, cg, s.cfg.settle)
	fmt.Fprintf(&b, "| state | process | Services | working set | cgroup usage | inactive file | cgroup anon | cgroup file | cgroup peak | RSS | RSS anon | RSS file | peak RSS | Go heap |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
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
			name := p.name
			if l, ok := s.limits[p.name]; ok && st == memPressure {
				name += fmt.Sprintf(" (limit %.1f MiB, %d OOM kills)", l, m.cg.ooms)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
				st, name, s.services[st], m.cg.workingSet, m.cg.usage, m.cg.inactiveFile, m.cg.anon, m.cg.file, m.cg.peak, m.rss, m.anon, m.file, m.hwm, heap)
		}
	}
	fmt.Fprintf(&b, "\nWorking set (RSS) in MiB. NodeLocal per node: node-cache plus %d/%d of a CoreDNS replica (the Deployment's replicas at %d nodes).\n\n", deploymentReplicas(memNodes), memNodes, memNodes)
	fmt.Fprintf(&b, "| state | CPUs | nodedns pod | backend cgroup peak | node-cache | NodeLocal per node | CoreDNS replica | pod / NodeLocal (working set) | took |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range s.states {
		for _, c := range s.cfg.cpus {
			if _, ok := s.get(st, memName(roleSpec, c)); !ok {
				continue
			}
			pod := s.pod(st, c)
			be, _ := s.get(st, memName(roleSpec, c))
			nc, _ := s.peer(st, roleNodeCache, c)
			nl, nlOK := s.nodeLocal(st, c)
			cd, _ := s.peer(st, roleCoreDNS, s.cfg.cpus[0])
			ratio := "—"
			if nlOK && nl.workingSet > 0 {
				ratio = fmt.Sprintf("%.2f", pod.workingSet/nl.workingSet)
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f (%.1f) | %.1f | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %s | %s |\n",
				st, c, pod.workingSet, pod.rss, be.cg.peak, nc.workingSet, nc.rss, nl.workingSet, nl.rss, cd.workingSet, cd.rss, ratio, s.createdIn[st].Round(time.Second))
		}
	}
	if _, ok := s.samples[memPressure]; ok {
		fmt.Fprintf(&b, "\nUnder pressure: %d queries to the frontend and %d to node-cache failed (limits: %v MiB).\n", s.pressureFailed, s.pressureFailedNC, s.limits)
	}
	return b.String()
}
