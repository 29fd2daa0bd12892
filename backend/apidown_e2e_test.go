package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/testbed"
)

// apiDownSecondsEnv sets how long TestAPIServerDown keeps the API server
// down before the backend is restarted (default 10).
const apiDownSecondsEnv = "NODEDNS_APIDOWN_SECONDS"

// apiDownModeEnv sets how TestAPIServerDown takes the API server away:
// "stop" (default) stops kube-apiserver, whose port then refuses;
// "freeze" stops the process with SIGSTOP: connections are accepted by
// the kernel and never answered, as behind a black hole.
const apiDownModeEnv = "NODEDNS_APIDOWN_MODE"

// hostAddr returns an IPv4 address of the machine's own, not loopback:
// the API-server-down test's fallback listener is bound to it and its
// client asks from it, an address that only a Node object's pod CIDR
// allows (NODEDNS_FALLBACK_ALLOW=nodes; loopback is always answered).
func hostAddr(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no IPv4 address other than loopback on this machine: the fallback listener's client needs one")
	return ""
}

// downProbe is one name the load asks, with the answer that counts as
// answered.
type downProbe struct {
	name  string
	rcode int
	a     string // the A record wanted; "" for none
}

// downCount is what one listener's lookups of one phase got.
type downCount struct {
	sent, answered, failed, lost int
	rcodes                       map[string]int // of the failed
}

func (c *downCount) String() string {
	var rc []string
	for k, v := range c.rcodes {
		rc = append(rc, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(rc)
	return fmt.Sprintf("%d sent, %d answered, %d failed %v, %d lost", c.sent, c.answered, c.failed, rc, c.lost)
}

// downLoad sends the probes at a steady rate to the main listener (TCP,
// as the frontend does) and to the fallback listener (UDP, from
// downClientIP) and counts the results by phase.
type downLoad struct {
	mu     sync.Mutex
	phase  string
	counts map[string]*downCount // phase + " " + listener
	first  map[string]time.Time  // phase + " " + listener: first external answer
	wg     sync.WaitGroup
}

func (l *downLoad) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

func (l *downLoad) count(phase, listener string) *downCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[phase+" "+listener]
	if c == nil {
		return &downCount{}
	}
	cc := *c
	return &cc
}

func (l *downLoad) firstExternal(phase, listener string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.first[phase+" "+listener]
	return t, ok
}

func (l *downLoad) record(listener string, p downProbe, r *dns.Msg, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := l.phase + " " + listener
	c := l.counts[key]
	if c == nil {
		c = &downCount{rcodes: map[string]int{}}
		l.counts[key] = c
	}
	c.sent++
	switch {
	case err != nil:
		c.lost++
	case r.Rcode == p.rcode && (p.a == "" || firstA(r) == p.a):
		c.answered++
		if p.name == "fwd.example." {
			if _, ok := l.first[key]; !ok {
				l.first[key] = time.Now()
			}
		}
	default:
		c.failed++
		c.rcodes[dns.RcodeToString[r.Rcode]]++
	}
}

// run sends one probe per interval to each listener until ctx ends.
func (l *downLoad) run(ctx context.Context, b *backend, client string, probes []downProbe, interval time.Duration) {
	clients := map[string]struct {
		c    *dns.Client
		addr string
	}{
		"main":     {&dns.Client{Net: "tcp", Timeout: time.Second}, b.DNS},
		"fallback": {&dns.Client{Net: "udp", Timeout: time.Second, Dialer: &net.Dialer{Timeout: time.Second, LocalAddr: &net.UDPAddr{IP: net.ParseIP(client)}}}, b.Fallback},
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			l.wg.Wait()
			return
		case <-t.C:
		}
		p := probes[i%len(probes)]
		for name, c := range clients {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				r, _, err := c.c.Exchange(queryFor(p.name, dns.TypeA), c.addr)
				l.record(name, p, r, err)
			}()
		}
	}
}

// TestAPIServerDown runs the backend with the default Corefile against a
// real API server and keeps lookups going to both of its listeners while
// the API server is down: first for the running backend, then for a
// backend restarted during the outage (with the snapshots of its last
// run, then without), then once the API server is back: a Service created
// then resolves on both listeners.
func TestAPIServerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test; -short given")
	}
	down := 10 * time.Second
	if s := os.Getenv(apiDownSecondsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want whole seconds", apiDownSecondsEnv, s)
		}
		down = time.Duration(n) * time.Second
	}
	mode := os.Getenv(apiDownModeEnv)
	if mode == "" {
		mode = "stop"
	}
	if mode != "stop" && mode != "freeze" {
		t.Fatalf("%s=%q: want stop or freeze", apiDownModeEnv, mode)
	}
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := &kube{t: t, ctx: ctx, c: tb.Client(), ns: "down"}
	k.namespace()
	client := hostAddr(t)
	// The client's address as a node's pod CIDR: the fallback listener
	// answers it only while its Node set holds it.
	podCIDR := client + "/32"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	if _, err := k.c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	web := k.service("web", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}})
	k.service("db", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}})
	k.slice("db", "db-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("pg", 5432, corev1.ProtocolTCP)}, ep("10.2.0.1", "db-0", true))

	const zone = ".down.svc.cluster.local."
	probes := []downProbe{
		{"web" + zone, dns.RcodeSuccess, web.Spec.ClusterIP},
		{"db" + zone, dns.RcodeSuccess, "10.2.0.1"},
		{"fwd.example.down.svc.cluster.local.", dns.RcodeNameError, ""},
		{"fwd.example.svc.cluster.local.", dns.RcodeNameError, ""},
		{"fwd.example.cluster.local.", dns.RcodeNameError, ""},
		{"fwd.example.", dns.RcodeSuccess, "192.0.2.1"},
	}

	snapDir := t.TempDir()
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr, "NODEDNS_FALLBACK_ALLOW=nodes", "NODEDNS_FALLBACK_BIND="+client, "NODEDNS_SNAPSHOT_DIR="+snapDir)
	// nodedns_acl's Node watch reads the testbed too.
	corefile := clusterCorefile(t, tb.Kubeconfig)
	const aclSnapshot = "        snapshot {$NODEDNS_SNAPSHOT_DIR}\n    }\n"
	fb := fallbackBlock(t, corefile)
	if strings.Count(fb, aclSnapshot) != 1 {
		t.Fatalf("the default Corefile's nodedns_acl has no snapshot line:\n%s", fb)
	}
	corefile = strings.TrimSuffix(corefile, fb) + strings.Replace(fb, aclSnapshot, "        kubeconfig "+tb.Kubeconfig+"\n"+aclSnapshot, 1)
	_, fbPort, _ := net.SplitHostPort(b.Fallback)
	b.Fallback = net.JoinHostPort(client, fbPort)
	b.start(t, corefile, env, 60*time.Second)
	// The nodes set is built a second after the Node watch syncs.
	eventuallyFrom(t, 10*time.Second, client, b.Fallback, "web"+zone, web.Spec.ClusterIP)

	l := &downLoad{counts: map[string]*downCount{}, first: map[string]time.Time{}, phase: "up"}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { l.run(loadCtx, b, client, probes, 20*time.Millisecond); close(loadDone) }()
	defer func() { stopLoad(); <-loadDone }()

	time.Sleep(3 * time.Second)
	l.setPhase("down")
	var apiPID int
	if mode == "freeze" {
		apiPID = tb.APIServerPID()
		if err := syscall.Kill(apiPID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Before the testbed's own cleanup, which stops it.
		t.Cleanup(func() { _ = syscall.Kill(apiPID, syscall.SIGCONT) })
	} else if err := tb.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server down (%s); load for %v", mode, down)
	time.Sleep(down)

	// Restart the backend with the API server still down: with the
	// snapshots its last run wrote, then without any.
	const restartWindow = 10 * time.Second
	restarted := map[string]time.Time{}
	for _, r := range []struct{ phase, dir string }{{"restart", snapDir}, {"nosnap", "none"}} {
		l.setPhase("stopping")
		b.stop()
		l.setPhase(r.phase)
		restarted[r.phase] = time.Now()
		b.launch(t, corefile, append(slices.Clone(env), "NODEDNS_SNAPSHOT_DIR="+r.dir))
		time.Sleep(restartWindow)
	}

	l.setPhase("back")
	if mode == "freeze" {
		if err := syscall.Kill(apiPID, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	} else if err := tb.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	late := k.service("late", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}})
	eventually(t, 30*time.Second, b.DNS, "late"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + late.Spec.ClusterIP})
	eventuallyFrom(t, 30*time.Second, client, b.Fallback, "late"+zone, late.Spec.ClusterIP)
	t.Logf("a Service created after the API server came back resolves %v after its return", time.Since(backAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stopLoad()
	<-loadDone

	t.Logf("API server down (%s) for %v; lookups every 20ms to each listener, names: %d cluster, 3 NXDOMAIN search-path, 1 external", mode, down, 2)
	for _, phase := range []string{"up", "down", "stopping", "restart", "nosnap", "back"} {
		for _, li := range []string{"main", "fallback"} {
			t.Logf("%-8s %-8s %s", phase, li, l.count(phase, li))
		}
	}
	for _, li := range []string{"main", "fallback"} {
		for _, phase := range []string{"up", "down"} {
			if c := l.count(phase, li); c.sent == 0 || c.lost != 0 || c.failed != 0 {
				t.Errorf("%s listener, phase %s (running backend): %s; want every lookup answered", li, phase, c)
			}
		}
		for _, phase := range []string{"restart", "nosnap"} {
			at, ok := l.firstExternal(phase, li)
			if phase == "nosnap" && li == "fallback" {
				// No Node snapshot: the client's network is unknown
				// until the Node watch lists, and it is REFUSED.
				if c := l.count(phase, li); ok || c.rcodes["REFUSED"] == 0 {
					t.Errorf("fallback listener restarted without snapshots: %s; want REFUSED (its client is allowed only by the Node set)", c)
				}
				continue
			}
			if !ok {
				t.Errorf("%s listener, phase %s: the restarted backend answered no external name within %v of its start", li, phase, restartWindow)
				continue
			}
			d := at.Sub(restarted[phase])
			t.Logf("%s listener, phase %s: the restarted backend's first external answer %v after its start", li, phase, d.Round(time.Millisecond))
			if d > 5*time.Second {
				t.Errorf("%s listener, phase %s: external names answered %v after the start, want within 5s", li, phase, d.Round(time.Millisecond))
			}
		}
		// With the snapshots, every name is answered once the ports
		// are open: what is lost is lost before.
		if c := l.count("restart", li); c.failed != 0 {
			t.Errorf("%s listener, restarted with snapshots: %s; want no failed lookup", li, c)
		}
	}
	if c := l.count("back", "main"); c.lost != 0 {
		t.Errorf("main listener after the API server's return: %s", c)
	}
	if !t.Failed() {
		return
	}
	t.Logf("backend output:\n%s", tail(b.proc.Output.String(), 4000))
}

// eventuallyFrom repeats a UDP A query to addr from client until it is
// answered with a.
func eventuallyFrom(t testing.TB, timeout time.Duration, client, addr, name, a string) {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: time.Second, Dialer: &net.Dialer{Timeout: time.Second, LocalAddr: &net.UDPAddr{IP: net.ParseIP(client)}}}
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		r, _, err := c.Exchange(queryFor(name, dns.TypeA), addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && firstA(r) == a {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = dns.RcodeToString[r.Rcode]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s A from %s to %s: %s after %v, want %s", name, client, addr, last, timeout, a)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := strings.IndexByte(s[len(s)-n:], '\n')
	return s[len(s)-n+i+1:]
}
