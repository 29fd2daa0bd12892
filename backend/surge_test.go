package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/testbed"
)

// surgeStartupTimeout is the kubernetes plugin's startup_timeout line of the
// default Corefile: TestSurge checks what it promises, so it fails if the
// line changes.
const surgeStartupTimeout = "startup_timeout 60s"

// TestSurge runs a surge rollout on one node: backend A serves, backend B
// starts beside it on the same DNS address (SO_REUSEPORT) while it cannot
// reach the API server, then syncs, and A is stopped with SIGTERM. Queries
// for a Service, each TCP query on a new connection so the kernel spreads
// them over every listening socket, must be answered correctly throughout:
// B may open its DNS port only once it has synced (startup_timeout), and A
// keeps answering through its lameduck. As the chart sets them up, A and B
// serve /ready and /health on the same ports but each on a loopback address
// of its own (the chart's probeAddress, one per pod template): B's /ready
// says 503 at its address while A's says 200 at A's, so B's probes and its
// frontend's gate see B. The control subtest shows what a shared address
// does instead.
func TestSurge(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test; -short given")
	}
	if !strings.Contains(string(defaultCorefile), surgeStartupTimeout) {
		t.Fatalf("default Corefile has no %q line: the behaviour this test checks is gone", surgeStartupTimeout)
	}
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := &kube{t: t, ctx: ctx, c: tb.Client(), ns: "surge"}
	k.namespace()
	web := k.service("web", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}})
	const zone = ".surge.svc.cluster.local."
	want := []string{"A " + web.Spec.ClusterIP}

	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)

	// A: the old pod's backend, synced and serving, with /ready and
	// /health on its own probe address.
	readyA, readyB := probeAddrPair(t)
	healthA, healthB := probeAddrPair(t)
	a, _ := backendPorts(t)
	a.Ready, a.Health = readyA, healthA
	a.start(t, clusterCorefile(t, tb.Kubeconfig), append(a.env(), "NODEDNS_UPSTREAM="+up.Addr), 60*time.Second)
	eventually(t, 10*time.Second, a.DNS, "web"+zone, dns.TypeA, dns.RcodeSuccess, want)
	if t.Failed() {
		t.FailNow()
	}

	// B: the new pod's backend on the same DNS and fallback addresses, and
	// on the same ready and health ports as A at its own probe address. Its
	// API server is behind a gate that holds connections until opened.
	gate := startAPIGate(t, strings.TrimPrefix(tb.URL(), "https://"))
	b := surgePeer(t, a, readyB, healthB)
	b.launch(t, clusterCorefile(t, kubeconfigVia(t, tb.Kubeconfig, gate.Addr())), append(b.env(), "NODEDNS_UPSTREAM="+up.Addr))
	bStart := time.Now()
	bPID := b.proc.Cmd.Process.Pid
	dnsPort := portOf(t, a.DNS)

	// Phase 1: B runs but has not synced. It must have tried the API
	// server (the gate holds its connections), keep its DNS port closed
	// and its /ready not 200, while every query is answered by A.
	load := startSurgeLoad(t, a.DNS, "web"+zone, want, "B unsynced")
	waitFor(t, 20*time.Second, "B to connect to the gated API server", func() (bool, error) {
		return gate.Accepted() > 0, b.exited()
	})
	// minUnsynced is past CoreDNS's default startup_timeout (5s): with
	// it, B would have opened its port by then (see the control below).
	const minQueries, minUnsynced = 500, 10 * time.Second
	readyCodes := map[int]int{} // 0: no answer
	for {
		code, _, _ := httpGet("http://" + b.Ready + "/ready")
		readyCodes[code]++
		if code == http.StatusOK {
			t.Fatalf("B's /ready at %s answered 200 %v after start with its API server gated", b.Ready, time.Since(bStart))
		}
		if code, _, err := httpGet("http://" + a.Ready + "/ready"); code != http.StatusOK {
			t.Fatalf("A's /ready at %s, on the port B's also listens on: code %d, %v; want 200", a.Ready, code, err)
		}
		for _, table := range []string{"tcp", "udp"} {
			held, err := holdsSocket(bPID, table, dnsPort)
			if err != nil {
				t.Fatal(err)
			}
			if held {
				t.Fatalf("B opened its DNS port (%s) %v after start, before its kubernetes plugin synced", table, time.Since(bStart))
			}
		}
		if err := b.exited(); err != nil {
			t.Fatal(err)
		}
		s := load.current()
		if s.ok[0].Load() >= minQueries && s.ok[1].Load() >= minQueries && time.Since(bStart) >= minUnsynced {
			break
		}
		if time.Since(bStart) > 40*time.Second { // well inside startup_timeout
			t.Fatalf("fewer than %d TCP and %d UDP answers in 40s: %s", minQueries, minQueries, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := b.proc.Output.String(); !strings.Contains(out, "waiting for Kubernetes API before starting server") {
		t.Errorf("B's log does not say it waits for the API server:\n%s", out)
	}
	// The ready and health listeners start before the wait for the sync:
	// B says it is alive but not ready.
	if readyCodes[http.StatusServiceUnavailable] == 0 {
		t.Errorf("B's /ready never answered 503 while unsynced (codes seen, 0 for none: %v)", readyCodes)
	}
	if code, _, err := httpGet("http://" + b.Health + "/health"); code != http.StatusOK {
		t.Errorf("B's /health while unsynced: code %d, %v; want 200", code, err)
	}
	t.Logf("B unsynced for %v: DNS port (TCP and UDP) not held by B and its /ready at %s not 200 at every poll (codes seen, 0 for none: %v), A's at %s 200; gate held %d connections",
		time.Since(bStart).Round(time.Millisecond), b.Ready, readyCodes, a.Ready, gate.Accepted())

	// Phase 2: B reaches the API server, syncs and opens its DNS port.
	load.setPhase("B syncing")
	gate.Open()
	opened := time.Now()
	waitFor(t, 30*time.Second, "B to sync and listen on the DNS port", func() (bool, error) {
		code, _, _ := httpGet("http://" + b.Ready + "/ready")
		if code != http.StatusOK {
			return false, b.exited()
		}
		tcp, err := holdsSocket(bPID, "tcp", dnsPort)
		if err != nil {
			return false, err
		}
		udp, err := holdsSocket(bPID, "udp", dnsPort)
		return tcp && udp, err
	})
	t.Logf("B ready and listening %v after the gate opened, %v after start",
		time.Since(opened).Round(time.Millisecond), time.Since(bStart).Round(time.Millisecond))

	// Phase 3: both serve; the kernel spreads new connections over both.
	load.setPhase("A and B")
	time.Sleep(3 * time.Second)
	bTCP, bUDP := dnsRequests(t, b, "tcp"), dnsRequests(t, b, "udp")
	if bTCP == 0 || bUDP == 0 {
		t.Errorf("B served %d TCP and %d UDP queries while both listened: the load did not reach it", bTCP, bUDP)
	}

	// Phase 4: A goes away with SIGTERM; its lameduck keeps it answering.
	load.setPhase("A lameduck")
	sigterm := time.Now()
	a.stop()
	aExit := time.Now()
	t.Logf("A exited %v after SIGTERM", aExit.Sub(sigterm).Round(time.Millisecond))

	// Phase 5: B alone.
	load.setPhase("B alone")
	time.Sleep(2 * time.Second)
	load.stopAndWait()

	var lostAtExit int
	for _, s := range load.phases {
		t.Logf("%s", s)
		for _, f := range s.failures {
			// After the lameduck CoreDNS closes its listeners and
			// connections and exits. A connection the kernel had
			// already given to A's listening socket, queued or with
			// its query being read, is closed unanswered (Linux hands
			// queued connections to another SO_REUSEPORT socket only
			// with net.ipv4.tcp_migrate_req=1, off by default); a UDP
			// query queued on A's socket is dropped. Such a query was
			// in flight at A's exit, and each worker has at most one
			// in flight.
			if s.name == "A lameduck" && f.err != nil && !f.start.After(aExit) && f.end.After(aExit.Add(-time.Second)) {
				lostAtExit++
				t.Logf("  lost at A's exit (failed %v before A's exit was seen): %s", aExit.Sub(f.end).Round(time.Millisecond), f)
				continue
			}
			t.Errorf("  %s: %s", s.name, f)
		}
		if s.ok[0].Load() == 0 || s.ok[1].Load() == 0 {
			t.Errorf("phase %q has no correct TCP or UDP answer: %s", s.name, s)
		}
	}
	if lostAtExit > surgeWorkers {
		t.Errorf("%d queries lost at A's exit; at most %d (one per worker) can be in flight", lostAtExit, surgeWorkers)
	}
	t.Logf("B served %d TCP and %d UDP queries while A also listened", bTCP, bUDP)
	if out := b.proc.Output.String(); strings.Contains(out, "starting server with unsynced Kubernetes API") {
		t.Errorf("B started unsynced (startup_timeout ran out):\n%s", out)
	}

	// A Service created now is answered by B alone, from its watch.
	late := k.service("late", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}})
	eventually(t, 10*time.Second, b.DNS, "late"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + late.Spec.ClusterIP})

	// Control: a backend that opens its port unsynced does answer wrongly
	// on the shared address, so the checks above can see the failure the
	// startup_timeout prevents. It also shares B's ready address, as every
	// pod did before the probe address: requests to it, as its probes and
	// its frontend's gate would make them, get 200 from B although it has
	// not synced.
	t.Run("control-short-startup-timeout", func(t *testing.T) {
		closed := startAPIGate(t, strings.TrimPrefix(tb.URL(), "https://"))
		c := surgePeer(t, b, b.Ready, dnstest.FreeAddr(t))
		core := strings.Replace(clusterCorefile(t, kubeconfigVia(t, tb.Kubeconfig, closed.Addr())), surgeStartupTimeout, "startup_timeout 2s", 1)
		c.launch(t, core, append(c.env(), "NODEDNS_UPSTREAM="+up.Addr))
		waitFor(t, 20*time.Second, "the unsynced backend to listen", func() (bool, error) {
			held, err := holdsSocket(c.proc.Cmd.Process.Pid, "tcp", dnsPort)
			if err != nil {
				return false, err
			}
			return held, c.exited()
		})
		var servfail, right int
		for range 200 {
			cl := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
			r, _, err := cl.Exchange(dnstest.Query("web"+zone, dns.TypeA), b.DNS)
			switch {
			case err != nil:
				t.Fatalf("query: %v", err)
			case r.Rcode == dns.RcodeServerFailure:
				servfail++
			case expect(r, dns.RcodeSuccess, want, nil) == nil:
				right++
			default:
				t.Fatalf("answer neither right nor SERVFAIL: %v", r)
			}
		}
		t.Logf("with startup_timeout 2s and no API server: %d of 200 TCP queries SERVFAIL, %d right", servfail, right)
		if servfail == 0 {
			t.Errorf("no SERVFAIL from a backend listening unsynced: the spreading this test relies on did not happen")
		}
		codes := readyOnNewConnections(t, "http://"+c.Ready+"/ready", 100)
		t.Logf("/ready at %s, shared by B (synced) and the unsynced backend: codes %v of 100", c.Ready, codes)
		if codes[http.StatusOK] == 0 || codes[http.StatusServiceUnavailable] == 0 {
			t.Errorf("/ready on a shared address: codes %v, want both 200 (B answering for the unsynced backend) and 503", codes)
		}
		_ = c.proc.Cmd.Process.Kill() // no lameduck needed
		<-c.proc.Done()
	})
}

// surgePeer returns a backend on the DNS and fallback addresses of a, with
// /ready and /health on ready and health, and metrics of its own (so that
// dnsRequests counts its queries only).
func surgePeer(t testing.TB, a *backend, ready, health string) *backend {
	return &backend{
		DNS:      a.DNS,
		Fallback: a.Fallback,
		Health:   health,
		Ready:    ready,
		Metrics:  dnstest.FreeAddr(t),
	}
}

// probeAddrPair returns two addresses with one port, on two loopback
// addresses 127.X.Y.1 outside 127.0.0.0/24, as the chart gives the old and
// the new pod of a surge: the port was free on both a moment ago.
func probeAddrPair(t testing.TB) (string, string) {
	t.Helper()
	for range 20 {
		x := 1 + rand.IntN(254)
		hosts := [2]string{fmt.Sprintf("127.%d.%d.1", x, rand.IntN(256)), fmt.Sprintf("127.%d.%d.1", 1+(x%254), rand.IntN(256))}
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatalf("listen on %s (all of 127.0.0.0/8 is local on Linux): %v", hosts[0], err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l2, err := net.Listen("tcp", net.JoinHostPort(hosts[1], port))
		l.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return net.JoinHostPort(hosts[0], port), net.JoinHostPort(hosts[1], port)
	}
	t.Fatal("no port free on two loopback addresses")
	return "", ""
}

// readyOnNewConnections GETs url n times, each on a new connection (the
// kernel picks a listening socket afresh, as for kubelet's probes), and
// counts the status codes (0: no answer).
func readyOnNewConnections(t testing.TB, url string, n int) map[int]int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	codes := map[int]int{}
	for range n {
		resp, err := c.Get(url)
		if err != nil {
			codes[0]++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	return codes
}

// exited returns an error once the backend process has exited.
func (b *backend) exited() error {
	select {
	case <-b.proc.Done():
		return fmt.Errorf("backend exited: %v\n%s", b.proc.Err(), b.proc.Output.String())
	default:
		return nil
	}
}

// dnsRequests is the number of queries over proto ("tcp" or "udp") that
// b's DNS listener has counted.
func dnsRequests(t testing.TB, b *backend, proto string) int64 {
	t.Helper()
	code, text, err := httpGet("http://" + b.Metrics + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("metrics of %s: code %d, %v", b.Metrics, code, err)
	}
	var n int64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "coredns_dns_requests_total{") || !strings.Contains(line, `server="dns://`+b.DNS+`"`) ||
			!strings.Contains(line, `proto="`+proto+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int64(v)
	}
	return n
}

func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 100ms until it is true, fails, or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait for %s: not after %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdsSocket reports whether process pid holds a socket bound to
// 127.0.0.1:port in /proc/net/<table>, "tcp" (listening sockets only) or
// "udp". With SO_REUSEPORT several processes hold such sockets; the /proc
// tables tell whose they are by inode.
func holdsSocket(pid int, table string, port int) (bool, error) {
	data, err := os.ReadFile("/proc/net/" + table)
	if err != nil {
		return false, err
	}
	// local_address is the IPv4 address as a host-order (little-endian
	// here) hex word, then the port in hex.
	local := fmt.Sprintf("0100007F:%04X", port)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[1] != local {
			continue
		}
		if table == "tcp" && f[3] != "0A" { // TCP_LISTEN
			continue
		}
		inodes["socket:["+f[9]+"]"] = true
	}
	if len(inodes) == 0 {
		return false, nil
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err == nil && inodes[link] { // an fd closed meanwhile is not ours
			return true, nil
		}
	}
	return false, nil
}

// kubeconfigVia copies kubeconfig with the API server's address replaced by
// addr (host:port). The serving certificate is for the IP, not the port, so
// TLS through a forwarder on another loopback port still verifies.
func kubeconfigVia(t testing.TB, kubeconfig, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(t.TempDir(), "gated.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiGate is a TCP forwarder to the API server that holds every connection
// it accepts, unanswered, until Open: to a client, an API server that is
// reachable but does not respond. Open forwards the held connections and
// every later one.
type apiGate struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64

	mu    sync.Mutex // guards the fields below
	open  bool
	held  []net.Conn
	conns []net.Conn // every connection, closed by close
}

func startAPIGate(t testing.TB, target string) *apiGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &apiGate{ln: ln, target: target}
	go g.serve()
	t.Cleanup(g.close)
	return g
}

// Addr is the gate's host:port.
func (g *apiGate) Addr() string { return g.ln.Addr().String() }

// Accepted is the number of connections accepted so far.
func (g *apiGate) Accepted() int64 { return g.accepted.Load() }

// Open forwards held and future connections to the target.
func (g *apiGate) Open() {
	g.mu.Lock()
	g.open = true
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, c := range held {
		go g.forward(c)
	}
}

func (g *apiGate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // closed
		}
		g.accepted.Add(1)
		g.mu.Lock()
		g.conns = append(g.conns, c)
		open := g.open
		if !open {
			g.held = append(g.held, c)
		}
		g.mu.Unlock()
		if open {
			go g.forward(c)
		}
	}
}

func (g *apiGate) forward(c net.Conn) {
	u, err := net.Dial("tcp", g.target)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns = append(g.conns, u)
	g.mu.Unlock()
	go func() {
		_, _ = io.Copy(u, c)
		u.Close()
	}()
	_, _ = io.Copy(c, u)
	c.Close()
}

func (g *apiGate) close() {
	g.ln.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
}

// surgeWorkers is the number of query loops of a surgeLoad: half TCP, half
// UDP. Few, with a pause between queries, to leave the two shared cores to
// the backends and the API server.
const (
	surgeWorkers = 4
	surgePause   = 5 * time.Millisecond
)

// surgeLoad queries one name from surgeWorkers loops until stopped: every
// TCP query on a new connection and every UDP query from a new socket, so
// the kernel picks a listening socket afresh each time. Outcomes are counted
// in the phase current when the query was sent.
type surgeLoad struct {
	addr, name string
	want       []string

	phase  atomic.Pointer[surgePhase]
	phases []*surgePhase // in order; appended by setPhase only
	stop   chan struct{}
	wg     sync.WaitGroup
}

// surgePhase counts the outcomes of one phase.
type surgePhase struct {
	name  string
	ok    [2]atomic.Int64 // right answers: [0] TCP, [1] UDP
	wrong atomic.Int64    // answers other than want

	mu       sync.Mutex // guards failures
	failures []surgeFailure
}

// surgeFailure is one query without the right answer.
type surgeFailure struct {
	network    string
	start, end time.Time
	err        error    // no answer
	answer     *dns.Msg // a wrong answer (err nil)
}

func (f surgeFailure) String() string {
	at := f.start.Format("15:04:05.000")
	if f.err != nil {
		return fmt.Sprintf("%s query at %s, %v later: %v", f.network, at, f.end.Sub(f.start).Round(time.Millisecond), f.err)
	}
	return fmt.Sprintf("%s query at %s: wrong answer %s %q", f.network, at, dns.RcodeToString[f.answer.Rcode], rdata(f.answer.Answer))
}

func (p *surgePhase) String() string {
	p.mu.Lock()
	failed := len(p.failures)
	p.mu.Unlock()
	return fmt.Sprintf("phase %q: %d TCP and %d UDP right, %d wrong, %d without the right answer",
		p.name, p.ok[0].Load(), p.ok[1].Load(), p.wrong.Load(), failed)
}

// startSurgeLoad starts the query loops, counting in phase.
func startSurgeLoad(t testing.TB, addr, name string, want []string, phase string) *surgeLoad {
	l := &surgeLoad{addr: addr, name: name, want: want, stop: make(chan struct{})}
	l.setPhase(phase)
	for i := range surgeWorkers {
		network := "tcp"
		if i%2 == 1 {
			network = "udp"
		}
		l.wg.Add(1)
		go l.run(network)
	}
	t.Cleanup(l.stopAndWait)
	return l
}

// setPhase starts counting in a new phase. Only the test's goroutine calls it.
func (l *surgeLoad) setPhase(name string) {
	p := &surgePhase{name: name}
	l.phases = append(l.phases, p)
	l.phase.Store(p)
}

func (l *surgeLoad) current() *surgePhase { return l.phase.Load() }

func (l *surgeLoad) stopAndWait() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *surgeLoad) run(network string) {
	defer l.wg.Done()
	proto := 0
	if network == "udp" {
		proto = 1
	}
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		p := l.phase.Load()
		c := &dns.Client{Net: network, Timeout: 5 * time.Second}
		start := time.Now()
		r, _, err := c.Exchange(dnstest.Query(l.name, dns.TypeA), l.addr)
		switch {
		case err != nil:
			p.fail(surgeFailure{network: network, start: start, end: time.Now(), err: err})
		case expect(r, dns.RcodeSuccess, l.want, nil) != nil:
			p.wrong.Add(1)
			p.fail(surgeFailure{network: network, start: start, end: time.Now(), answer: r})
		default:
			p.ok[proto].Add(1)
		}
		time.Sleep(surgePause)
	}
}

func (p *surgePhase) fail(f surgeFailure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) < 100 {
		p.failures = append(p.failures, f)
	}
}
