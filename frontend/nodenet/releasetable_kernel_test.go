package nodenet_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/nodenet"
	"github.com/nodedns/nodedns/shared/netnstest"
)

// The release table's kernel test: a pod namespace, a node namespace with
// an iptables DNAT of the ClusterIP standing in for kube-proxy, and an
// endpoint namespace answering as kube-dns would. Queries to the local IP
// must be answered by the endpoint while no frontend serves it, by the
// frontend's sockets while one does, and never be lost in between.

const (
	endpointIP  = "10.0.1.2"
	endpointAns = "192.0.2.77" // what the endpoint (kube-dns) answers
	frontAns    = "192.0.2.10" // what the local "frontend" answers
)

// freebindServer answers ans on addr (UDP and TCP) with freebind sockets
// made inside ns, as the frontend binds before its addresses exist; stop
// closes them, as a frontend that exits does.
func freebindServer(t *testing.T, ns *netnstest.NetNS, addr, ans string) (stop func()) {
	t.Helper()
	var n atomic.Int64
	var pc net.PacketConn
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		if pc, err = freebind.ListenPacket(context.Background(), "udp", addr); err != nil {
			return err
		}
		ln, err = freebind.Listen(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var servers []*dns.Server
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: answer(ans, &n)}, {Listener: ln, Handler: answer(ans, &n)}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		servers = append(servers, s)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, s := range servers {
				_ = s.Shutdown()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// stream queries addr from ns without pause, alternating UDP and TCP, and
// counts the answers by their address and the failures.
type stream struct {
	ns     *netnstest.NetNS
	addr   string
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	byAns  map[string]int
	failed []string
	phase  string
}

func (s *stream) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

func startStream(ns *netnstest.NetNS, addr string) *stream {
	s := &stream{ns: ns, addr: addr, stop: make(chan struct{}), done: make(chan struct{}), byAns: map[string]int{}}
	go func() {
		defer close(s.done)
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			default:
			}
			network := []string{"udp", "tcp"}[i%2]
			got, err := ask(s.ns, network, s.addr, fmt.Sprintf("q%d.example.", i), 2*time.Second)
			s.mu.Lock()
			if err != nil {
				s.failed = append(s.failed, fmt.Sprintf("%s %s #%d at %s: %v", s.phase, network, i, time.Now().Format("15:04:05.000"), err))
			} else {
				s.byAns[got]++
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *stream) count(ans string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byAns[ans]
}

// waitMore waits until the stream has had n more answers of ans.
func (s *stream) waitMore(t *testing.T, ans string, n int) {
	t.Helper()
	start := s.count(ans)
	waitFor(t, 10*time.Second, fmt.Sprintf("%d answers %s", n, ans), func() bool { return s.count(ans)-start >= n })
}

func (s *stream) end() (map[string]int, []string) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byAns, s.failed
}

// askAll asks addr over UDP and TCP from ns and fails unless both answers
// are want. The client's UDP socket is connected, so an answer from any
// other source than addr would never arrive.
func askAll(t *testing.T, ns *netnstest.NetNS, addr, want, phase string) {
	t.Helper()
	for _, network := range []string{"udp", "tcp"} {
		got, err := ask(ns, network, addr, "phase.example.", 2*time.Second)
		if err != nil || got != want {
			t.Errorf("%s: %s %s answered %q, %v; want %s", phase, network, addr, got, err, want)
		}
	}
}

// releaseCounters sums the packets the release table rewrote, by chain.
func releaseCounters(t *testing.T, ns *netnstest.NetNS) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	if err := ns.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tbl := &nftables.Table{Name: nodenet.ReleaseTable, Family: nftables.TableFamilyINet}
		for _, chain := range []string{"prerouting", "output"} {
			rules, err := c.GetRules(tbl, &nftables.Chain{Name: chain, Table: tbl})
			if err != nil {
				return err
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if ctr, ok := e.(*expr.Counter); ok {
						out[chain] += ctr.Packets
					}
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("release table counters: %v", err)
	}
	return out
}

func releaseTableExists(t *testing.T, ns *netnstest.NetNS) bool {
	t.Helper()
	var ok bool
	if err := ns.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		for _, tb := range tables {
			ok = ok || tb.Name == nodenet.ReleaseTable
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestKernelReleaseTable checks the release table in each mode, and over
// IPv6 in link-local mode: before takeover, while a frontend serves, and
// after its teardown, with a steady stream of queries across each change.
func TestKernelReleaseTable(t *testing.T) {
	netnstest.Require(t, "iptables", "ip6tables", "iptables-nft-save", "iptables-legacy-save")
	for _, tc := range []struct {
		name  string
		mode  nodenet.Mode
		local string
		host  bool // a hostNetwork client is served after teardown too
	}{
		{"link-local", nodenet.ModeLinkLocal, linkLocal, true},
		{"iptables", nodenet.ModeIPTables, linkLocal, true},
		{"node-ip", nodenet.ModeNodeIP, netnstest.NodeVethIP, false},
		{"link-local-ipv6", nodenet.ModeLinkLocal, linkLocal6, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testReleaseTable(t, tc.mode, tc.local, tc.host) })
	}
}

// The IPv6 counterparts of the endpoint's and the ClusterIP's addresses.
const (
	endpointIP6 = "fd00:1::2"
	clusterIP6  = "fd00:96::a"
)

func testReleaseTable(t *testing.T, mode nodenet.Mode, local string, hostCovered bool) {
	topo := netnstest.NodePod(t)
	node, pod := topo.Node, topo.Pod
	ep := netnstest.New(t, "endpoint")
	netnstest.Link(t, node, "ep0", []string{"10.0.1.1/24", "fd00:1::1/64"}, ep, "eth0", []string{endpointIP + "/24", endpointIP6 + "/64"})
	ep.Run("ip", "route", "add", "10.244.0.0/16", "via", "10.0.1.1")
	ep.Run("ip", "-6", "route", "add", "fd00:244::/32", "via", "fd00:1::1")
	// A node has a default route; without one a host process could not
	// even send to 169.254.20.10 once no interface holds it.
	node.Run("ip", "route", "add", "default", "via", endpointIP)
	node.Run("ip", "-6", "route", "add", "default", "via", endpointIP6)
	ipt, cluster, endpoint := "iptables", clusterIP, endpointIP
	if strings.Contains(local, ":") {
		ipt, cluster, endpoint = "ip6tables", clusterIP6, endpointIP6
	}
	// kube-proxy: the ClusterIP DNATed to the endpoint, for pods
	// (PREROUTING) and host processes (OUTPUT).
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		for _, p := range []string{"udp", "tcp"} {
			node.Run(ipt, "-t", "nat", "-A", chain, "-d", cluster, "-p", p, "--dport", "53",
				"-j", "DNAT", "--to-destination", net.JoinHostPort(endpoint, "53"))
		}
	}
	serveOn(t, ep, net.JoinHostPort(endpoint, "53"), endpointAns)
	// IPv6 links need a moment (duplicate address detection of their
	// link-local addresses) before the node can reach its neighbours.
	waitFor(t, 10*time.Second, "endpoint reachable from the node", func() bool {
		_, err := ask(node, "udp", net.JoinHostPort(endpoint, "53"), "ready.example.", 300*time.Millisecond)
		return err == nil
	})
	addr := net.JoinHostPort(local, "53")

	cfg := nodenet.Config{
		Mode:         mode,
		LocalIPs:     mustIPs(t, local),
		ServiceIPs:   mustIPs(t, cluster),
		ReleaseTo:    mustIPs(t, cluster),
		SyncInterval: time.Hour,
	}
	// node-ip mode: a host outside the node's networks, on a link of its
	// own, which the frontend would find carrying a default route.
	var outside *netnstest.NetNS
	if mode == nodenet.ModeNodeIP {
		outside = netnstest.New(t, "outside")
		netnstest.Link(t, node, "out0", []string{"10.0.2.1/24"}, outside, "eth0", []string{"10.0.2.2/24"})
		outside.Run("ip", "route", "add", "10.244.0.0/16", "via", "10.0.2.1")
		ep.Run("ip", "route", "add", "10.0.2.0/24", "via", "10.0.1.1")
		cfg.ReleaseSkipInterfaces = []string{"out0"}
	}
	m := newManager(t, node, cfg)
	ctx := context.Background()
	// Whatever happens, leave no table behind in the namespace (which is
	// deleted anyway).
	t.Cleanup(func() { _ = node.Do(func() error { return deleteReleaseTable() }) })

	// In link-local and iptables mode the frontend binds its sockets
	// before the address exists; in node-ip mode the node IP exists and
	// a socket bound to it would serve, so it binds at takeover here.
	var stop func()
	if mode != nodenet.ModeNodeIP {
		stop = freebindServer(t, node, addr, frontAns)
	}

	// Before takeover: the frontend starts and converges the table.
	if err := node.Do(func() error { return m.RemoveStale(ctx) }); err != nil {
		t.Fatal(err)
	}
	if !releaseTableExists(t, node) {
		t.Fatal("no release table after RemoveStale")
	}
	askAll(t, pod, addr, endpointAns, "before takeover, pod")
	if hostCovered {
		askAll(t, node, addr, endpointAns, "before takeover, host process")
	}

	s := startStream(pod, addr)
	s.setPhase("before")
	s.waitMore(t, endpointAns, 20)
	s.setPhase("takeover")

	// Takeover.
	if mode == nodenet.ModeNodeIP {
		stop = freebindServer(t, node, addr, frontAns)
	}
	if err := node.Do(func() error { return m.Sync(ctx) }); err != nil {
		t.Fatal(err)
	}
	s.waitMore(t, frontAns, 20)
	s.setPhase("served")
	mid := releaseCounters(t, node)
	s.waitMore(t, frontAns, 100)
	if after := releaseCounters(t, node); after["prerouting"] != mid["prerouting"] {
		t.Errorf("the table rewrote %d packets while the frontend served", after["prerouting"]-mid["prerouting"])
	}
	askAll(t, pod, addr, frontAns, "taken over, pod")
	askAll(t, node, addr, frontAns, "taken over, host process")

	// Stop with no successor, as takeover.Teardown does: release, drain
	// (the sockets close when the process exits), tear down.
	s.setPhase("release")
	if err := node.Do(func() error { return m.Release(ctx) }); err != nil {
		t.Fatal(err)
	}
	// The frontend still reads (drain), but new queries already go to
	// kube-dns.
	s.waitMore(t, endpointAns, 20)
	s.setPhase("teardown")
	stop()
	if err := node.Do(func() error { return m.Teardown(ctx) }); err != nil {
		t.Fatal(err)
	}
	s.waitMore(t, endpointAns, 50)
	s.setPhase("absent")
	if !releaseTableExists(t, node) {
		t.Fatal("Teardown deleted the release table")
	}
	askAll(t, pod, addr, endpointAns, "after teardown, pod")
	if mode == nodenet.ModeNodeIP {
		// A host outside the node's networks, arriving on the default
		// route's interface, gets nothing from the node IP: no open
		// resolver left behind.
		if got, err := ask(outside, "udp", addr, "outside.example.", 500*time.Millisecond); err == nil {
			t.Errorf("after teardown, a host outside the node's networks got %q from %s", got, addr)
		}
	}
	if hostCovered {
		askAll(t, node, addr, endpointAns, "after teardown, host process")
	}

	// A frontend coming back takes the node again.
	s.setPhase("back")
	stop = freebindServer(t, node, addr, frontAns)
	m2 := newManager(t, node, cfg)
	if err := node.Do(func() error {
		if err := m2.RemoveStale(ctx); err != nil {
			return err
		}
		return m2.Sync(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	s.waitMore(t, frontAns, 50)
	byAns, failed := s.end()
	askAll(t, pod, addr, frontAns, "back, pod")
	ctr := releaseCounters(t, node)
	t.Logf("%s mode, %s: stream answered %d by the endpoint, %d by the frontend, %d failed; the table rewrote %d packets in prerouting, %d in output",
		mode, addr, byAns[endpointAns], byAns[frontAns], len(failed), ctr["prerouting"], ctr["output"])
	if len(failed) > 0 {
		t.Errorf("%d queries failed: %s", len(failed), strings.Join(failed[:min(len(failed), 10)], "; "))
	}
	if ctr["prerouting"] == 0 {
		t.Error("the table rewrote no packet, yet the endpoint answered")
	}
	if hostCovered && ctr["output"] == 0 {
		t.Error("the output chain rewrote no packet, yet host processes got answers")
	}
	stop()
	if err := node.Do(func() error { return m2.Teardown(ctx) }); err != nil {
		t.Fatal(err)
	}
}

func deleteReleaseTable() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.AddTable(&nftables.Table{Name: nodenet.ReleaseTable, Family: nftables.TableFamilyINet})
	c.DelTable(&nftables.Table{Name: nodenet.ReleaseTable, Family: nftables.TableFamilyINet})
	return c.Flush()
}

func mustIPs(t *testing.T, s string) []net.IP {
	t.Helper()
	v, err := nodenet.ParseIPs(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
