package nodenet_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/nodenet"
	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// The end-to-end kernel tests run the real nodedns-frontend binary in a node
// namespace, in front of a fake backend, and query it from a pod namespace.
// A second node namespace plays the rest of the cluster: its fake backend is
// the fallback, and the target of the ClusterIP's DNAT (kube-proxy's rule).

const (
	node2IP   = "10.0.0.2"
	localAns  = "192.0.2.1" // the local backend's answer
	remoteAns = "192.0.2.2" // the other node's answer
)

// frontendBinary builds nodedns-frontend once per test run.
func frontendBinary(t *testing.T) string {
	t.Helper()
	return proctest.Build(t, "github.com/nodedns/nodedns/frontend", "nodedns-frontend")
}

// fakeBackend answers every A query with ans, over UDP and TCP, and serves
// a readiness URL, all inside ns.
type fakeBackend struct {
	srv      *dnstest.Server
	readyURL string
	ready    atomic.Bool
	queries  atomic.Int64
	http     *http.Server
}

func answer(ans string, n *atomic.Int64) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		n.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP(ans)}}
		}
		_ = w.WriteMsg(m)
	}
}

func startBackend(t *testing.T, ns *netnstest.NetNS) *fakeBackend {
	t.Helper()
	b := &fakeBackend{}
	err := ns.Do(func() error {
		b.srv = dnstest.Start(t, answer(localAns, &b.queries))
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		b.readyURL = "http://" + l.Addr().String() + "/ready"
		b.http = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !b.ready.Load() {
				http.Error(w, "kubernetes", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "OK")
		})}
		go func() { _ = b.http.Serve(l) }()
		t.Cleanup(func() { _ = b.http.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kill stops the backend as a crash would: nothing listens any more.
func (b *fakeBackend) kill() {
	b.ready.Store(false)
	b.srv.Close()
	_ = b.http.Close()
}

// serveOn answers ans on addr (UDP and TCP) with sockets made inside ns.
func serveOn(t *testing.T, ns *netnstest.NetNS, addr, ans string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	var pc net.PacketConn
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: answer(ans, &n)}, {Listener: ln, Handler: answer(ans, &n)}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return &n
}

// ask queries name from inside ns and returns the A record's address.
func ask(ns *netnstest.NetNS, network, addr, name string, timeout time.Duration) (string, error) {
	var got string
	err := ns.Do(func() error {
		c := &dns.Client{Net: network, Timeout: timeout}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err
		}
		if len(r.Answer) != 1 {
			return fmt.Errorf("%s: rcode %s, %d answers", name, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		got = r.Answer[0].(*dns.A).A.String()
		return nil
	})
	return got, err
}

// httpGet fetches url's path from inside ns on the calling thread (net/http
// would dial from another thread, outside the namespace).
func httpGet(ns *netnstest.NetNS, hostport, path string) (int, string, error) {
	var code int
	var body string
	err := ns.Do(func() error {
		c, err := net.DialTimeout("tcp", hostport, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
		code, body = resp.StatusCode, sb.String()
		return nil
	})
	return code, body, err
}

// cluster is a node running nodedns, one of its pods, and another node.
type cluster struct {
	node, pod, node2 *netnstest.NetNS
	backend          *fakeBackend
	remote           *atomic.Int64 // queries the other node answered
	handoverDir      string
	top              *testing.T // owns the processes started in subtests
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterDNAT(t, true)
}

// newClusterDNAT builds the cluster; fakeDNAT adds kube-proxy's ClusterIP
// DNAT by hand (tests with the real kube-proxy leave it to kube-proxy).
func newClusterDNAT(t *testing.T, fakeDNAT bool) *cluster {
	t.Helper()
	netnstest.Require(t, "iptables", "iptables-nft-save", "iptables-legacy-save", "go")
	topo := netnstest.NodePod(t)
	c := &cluster{top: t, node: topo.Node, pod: topo.Pod, node2: netnstest.New(t, "node2"), handoverDir: t.TempDir()}
	netnstest.Link(t, c.node, "node2", []string{"10.0.0.1/24"}, c.node2, "eth0", []string{node2IP + "/24"})
	c.node2.Run("ip", "route", "add", "10.244.0.0/16", "via", "10.0.0.1")
	// kube-proxy's view of kube-dns: the ClusterIP DNATed to the other
	// node's backend, with conntrack (and masquerading) active.
	if fakeDNAT {
		for _, p := range []string{"udp", "tcp"} {
			c.node.Run("iptables", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP, "-p", p, "--dport", "53",
				"-j", "DNAT", "--to-destination", node2IP+":53")
		}
		c.node.Run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-d", node2IP, "-j", "MASQUERADE")
	}
	c.remote = serveOn(t, c.node2, node2IP+":53", remoteAns)
	serveOn(t, c.node2, node2IP+":5301", remoteAns) // the fallback listener
	c.backend = startBackend(t, c.node)
	return c
}

func (c *cluster) args(extra ...string) []string {
	return append([]string{
		"--setup-network=true", "--mode=iptables",
		"--local-ip=" + linkLocal + "," + linkLocal6, "--service-ip=" + clusterIP,
		"--listen=" + linkLocal + ":53," + clusterIP + ":53,[" + linkLocal6 + "]:53",
		"--backend=" + c.backend.srv.Addr, "--backend-ready-url=" + c.backend.readyURL,
		"--fallback=" + node2IP + ":5301",
		"--metrics=127.0.0.1:9253", "--health=127.0.0.1:9254",
		"--sync-interval=500ms", "--handover-dir=" + c.handoverDir, "--log-level=info",
	}, extra...)
}

func (c *cluster) start(t *testing.T, extra ...string) *exec.Cmd {
	t.Helper()
	bin := frontendBinary(t)
	return c.node.Start(bin, c.args(extra...)...)
}

func (c *cluster) nodednsRules(t *testing.T) []string {
	return savedRules(t, c.node, nodenet.BackendNFT)
}

func (c *cluster) linkExists() bool {
	_, err := c.node.Exec("ip", "link", "show", "nodedns")
	return err == nil
}

func TestE2ETakeoverLifecycle(t *testing.T) {
	c := newCluster(t)
	fe := c.start(t)

	t.Run("gated until the backend is ready", func(t *testing.T) {
		waitFor(t, 10*time.Second, "health endpoint", func() bool {
			code, _, err := httpGet(c.node, "127.0.0.1:9254", "/ready")
			return err == nil && code != 0
		})
		time.Sleep(1500 * time.Millisecond) // more than one gate probe
		code, body, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the backend") {
			t.Errorf("/ready = %d %q, want 503 waiting for the backend", code, body)
		}
		if c.linkExists() || len(c.nodednsRules(t)) != 0 {
			t.Error("interface or rules installed before the backend was ready")
		}
	})

	c.backend.ready.Store(true)
	t.Run("takeover", func(t *testing.T) {
		waitFor(t, 10*time.Second, "/ready 200", func() bool {
			code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
			return code == http.StatusOK
		})
		for _, addr := range []string{linkLocal + ":53", clusterIP + ":53", "[" + linkLocal6 + "]:53"} {
			for _, network := range []string{"udp", "tcp"} {
				got, err := ask(c.pod, network, addr, "svc.example.", 2*time.Second)
				if err != nil || got != localAns {
					t.Errorf("pod %s %s: %q, %v; want the local backend's %s", network, addr, got, err, localAns)
				}
			}
		}
		if n := c.remote.Load(); n != 0 {
			t.Errorf("the other node answered %d queries while nodedns owned the ClusterIP", n)
		}
	})

	t.Run("no conntrack entries", func(t *testing.T) {
		const n = 1000
		before := conntrackCount(t, c.node)
		for i := range n {
			addr := []string{linkLocal + ":53", clusterIP + ":53"}[i%2]
			if _, err := ask(c.pod, "udp", addr, fmt.Sprintf("n%d.example.", i%100), time.Second); err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
		}
		after := conntrackCount(t, c.node)
		t.Logf("FIGURE conntrack: %d entries before, %d after %d UDP queries from the pod (half to %s, half to %s)", before, after, n, linkLocal, clusterIP)
		if after-before > 2 {
			t.Errorf("conntrack grew by %d", after-before)
		}
	})

	// 3 addresses × (udp, tcp) × 5 rules + 3 × 2 health-port rules + 6
	// for the connections to the loopback backend.
	wantRules := c.nodednsRules(t)
	if len(wantRules) != 42 {
		t.Errorf("%d rules installed, want 42", len(wantRules))
	}
	t.Run("deleted rule restored", func(t *testing.T) {
		c.node.Run("iptables", "-t", "raw", "-D", "PREROUTING", "-d", clusterIP+"/32", "-p", "udp", "-m", "udp", "--dport", "53",
			"-m", "comment", "--comment", "nodedns: notrack udp to 10.96.0.10:53", "-j", "NOTRACK")
		start := time.Now()
		waitFor(t, 2*time.Second, "rule restored", func() bool {
			return strings.Join(c.nodednsRules(t), "\n") == strings.Join(wantRules, "\n")
		})
		t.Logf("restored after %v (--sync-interval=500ms)", time.Since(start).Round(time.Millisecond))
	})

	var rulesBefore []string
	t.Run("SIGKILL then restart answers within 1s", func(t *testing.T) {
		rulesBefore = c.nodednsRules(t)
		_ = fe.Process.Signal(syscall.SIGKILL)
		_ = fe.Wait()
		if got := c.nodednsRules(t); strings.Join(got, "\n") != strings.Join(rulesBefore, "\n") || !c.linkExists() {
			t.Fatal("rules or interface gone after SIGKILL")
		}
		// Nothing answers now (a child the frontend forked for iptables may
		// hold its sockets for a moment, until it execs).
		waitFor(t, time.Second, "no answer after SIGKILL", func() bool {
			_, err := ask(c.pod, "udp", clusterIP+":53", "dead.example.", 100*time.Millisecond)
			return err != nil
		})
		start := time.Now()
		fe = c.start(t)
		var took time.Duration
		for {
			if _, err := ask(c.pod, "udp", clusterIP+":53", "restart.example.", 50*time.Millisecond); err == nil {
				took = time.Since(start)
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatal("no answer 10s after restart")
			}
		}
		t.Logf("FIGURE restart: first answer to the pod %v after exec of the restarted frontend", took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("answered after %v, want within 1s", took)
		}
	})

	t.Run("backend killed under load", func(t *testing.T) {
		waitFor(t, 10*time.Second, "/ready 200", func() bool {
			code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
			return code == http.StatusOK
		})
		// Warm the cache.
		for i := range 20 {
			if _, err := ask(c.pod, "udp", linkLocal+":53", fmt.Sprintf("cached%d.example.", i), time.Second); err != nil {
				t.Fatal(err)
			}
		}
		var sent, lost, fromCache, fromFallback atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					name := fmt.Sprintf("cached%d.example.", i%20)
					miss := i%5 == 4
					if miss {
						name = fmt.Sprintf("miss-%d-%d.example.", w, i)
					}
					sent.Add(1)
					got, err := ask(c.pod, "udp", linkLocal+":53", name, 2*time.Second)
					switch {
					case err != nil:
						lost.Add(1)
					case miss && got == remoteAns:
						fromFallback.Add(1)
					case !miss && got == localAns:
						fromCache.Add(1)
					}
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		c.backend.kill()
		killedAt := sent.Load()
		time.Sleep(3 * time.Second)
		cancel()
		wg.Wait()
		t.Logf("FIGURE backend killed: %d queries (%d after the kill), %d lost, %d cache hits answered, %d misses answered by the fallback",
			sent.Load(), sent.Load()-killedAt, lost.Load(), fromCache.Load(), fromFallback.Load())
		if fromFallback.Load() == 0 {
			t.Error("no miss answered by the fallback")
		}
		if lost.Load() > 0 {
			t.Errorf("%d queries lost", lost.Load())
		}
		code, body, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		if code != http.StatusOK || !strings.Contains(body, "backend down") {
			t.Errorf("/ready = %d %q; want 200 saying the backend is down", code, body)
		}
		_, metrics, _ := httpGet(c.node, "127.0.0.1:9253", "/metrics")
		if !strings.Contains(metrics, "nodedns_backend_ready 0") {
			t.Error("nodedns_backend_ready is not 0")
		}
	})

	t.Run("SIGTERM with another instance present keeps the rules", func(t *testing.T) {
		other, err := nodenet.Join(context.Background(), filepath.Join(c.handoverDir, "network.lock"))
		if err != nil {
			t.Fatal(err)
		}
		_ = fe.Process.Signal(syscall.SIGTERM)
		_ = fe.Wait()
		if len(c.nodednsRules(t)) == 0 || !c.linkExists() {
			t.Error("rules or interface removed although another instance runs")
		}
		_, release := other.Leave()
		release()
	})

	t.Run("SIGTERM as the last instance tears down; kube-proxy's DNAT takes over", func(t *testing.T) {
		c.backend = startBackend(t, c.node)
		c.backend.ready.Store(true)
		fe = c.start(t)
		waitFor(t, 10*time.Second, "/ready 200", func() bool {
			code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
			return code == http.StatusOK
		})
		_ = fe.Process.Signal(syscall.SIGTERM)
		_ = fe.Wait()
		if got := c.nodednsRules(t); len(got) != 0 {
			t.Errorf("rules left after teardown: %q", got)
		}
		if got := savedRules(t, c.node, nodenet.BackendLegacy); len(got) != 0 {
			t.Errorf("legacy rules left after teardown: %q", got)
		}
		if c.linkExists() {
			t.Error("interface left after teardown")
		}
		got, err := ask(c.pod, "udp", clusterIP+":53", "after.example.", 2*time.Second)
		if err != nil || got != remoteAns {
			t.Errorf("after teardown the pod's query to the ClusterIP: %q, %v; want the other node's %s through the DNAT", got, err, remoteAns)
		}
		// The control figure: the same queries through kube-proxy's DNAT.
		before := conntrackCount(t, c.node)
		for i := range 200 {
			if _, err := ask(c.pod, "udp", clusterIP+":53", fmt.Sprintf("dnat%d.example.", i), time.Second); err != nil {
				t.Fatalf("query %d through the DNAT: %v", i, err)
			}
		}
		t.Logf("FIGURE conntrack without nodedns: %d entries before, %d after 200 UDP queries to %s through the DNAT", before, conntrackCount(t, c.node), clusterIP)
	})
}

// TestE2EHotUpgrade starts a second frontend while the first serves a
// pod's load: the sockets are handed over, the node network stays in place,
// and SIGTERM to the old instance removes nothing.
func TestE2EHotUpgrade(t *testing.T) {
	c := newCluster(t)
	c.backend.ready.Store(true)
	old := c.start(t)
	waitFor(t, 10*time.Second, "/ready 200", func() bool {
		code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		return code == http.StatusOK
	})
	rules := c.nodednsRules(t)
	var sent, lost atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				sent.Add(1)
				addr := []string{linkLocal + ":53", clusterIP + ":53"}[i%2]
				if _, err := ask(c.pod, "udp", addr, fmt.Sprintf("up%d-%d.example.", w, i%200), 2*time.Second); err != nil {
					lost.Add(1)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	c.start(t)
	time.Sleep(2 * time.Second)
	_ = old.Process.Signal(syscall.SIGTERM)
	_ = old.Wait()
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	t.Logf("FIGURE hot upgrade: %d queries from the pod during the upgrade, %d lost", sent.Load(), lost.Load())
	if lost.Load() != 0 {
		t.Errorf("%d queries lost", lost.Load())
	}
	if got := c.nodednsRules(t); strings.Join(got, "\n") != strings.Join(rules, "\n") || !c.linkExists() {
		t.Error("the node network changed across the upgrade")
	}
	code, body, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
	if code != http.StatusOK {
		t.Errorf("new instance /ready = %d %q", code, body)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	os.Exit(code)
}
