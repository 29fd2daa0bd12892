package nodenet_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/frontend/nodenet"
	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/netnstest"
)

// Addresses the kernel tests take over inside their node namespace.
const (
	linkLocal  = "169.254.20.10"
	linkLocal6 = "fd00:10::10"
	clusterIP  = "10.96.0.10"
)

// freebind listens before the addresses exist, as the frontend does.
var freebind = net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}
	})
	return errors.Join(err, serr)
}}

// serveDNS answers every A query with 192.0.2.53 on addr (UDP and TCP),
// with sockets made inside ns.
func serveDNS(t *testing.T, ns *netnstest.NetNS, addrs ...string) {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("192.0.2.53")}}
		_ = w.WriteMsg(m)
	})
	for _, addr := range addrs {
		var pc net.PacketConn
		var ln net.Listener
		err := ns.Do(func() (err error) {
			if pc, err = freebind.ListenPacket(context.Background(), "udp", addr); err != nil {
				return err
			}
			ln, err = freebind.Listen(context.Background(), "tcp", addr)
			return err
		})
		if err != nil {
			t.Fatalf("listen %s: %v", addr, err)
		}
		for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			go func() { _ = s.ActivateAndServe() }()
			<-started
			t.Cleanup(func() { _ = s.Shutdown() })
		}
	}
}

// query asks from inside ns; it returns the error rather than failing.
func query(ns *netnstest.NetNS, network, addr string) error {
	return ns.Do(func() error {
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err
		}
		if len(r.Answer) != 1 {
			return fmt.Errorf("answer %v", r.Answer)
		}
		return nil
	})
}

func conntrackCount(t *testing.T, ns *netnstest.NetNS) int {
	t.Helper()
	var n int
	if err := ns.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err != nil {
			return err
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	}); err != nil {
		t.Fatalf("conntrack count: %v", err)
	}
	return n
}

// savedRules returns the nodedns rules of every table, sorted, as
// iptables-save of the given backend prints them.
func savedRules(t *testing.T, ns *netnstest.NetNS, backend nodenet.Backend) []string {
	t.Helper()
	var out []string
	for _, bin := range []string{"iptables-" + string(backend) + "-save", "ip6tables-" + string(backend) + "-save"} {
		table := ""
		for _, l := range strings.Split(ns.Run(bin), "\n") {
			if strings.HasPrefix(l, "*") {
				table = l[1:]
			}
			if strings.Contains(l, nodenet.CommentPrefix) {
				out = append(out, bin[:strings.IndexByte(bin, '-')]+" "+table+" "+l)
			}
		}
	}
	sortByTable(out)
	return out
}

func newManager(t *testing.T, ns *netnstest.NetNS, cfg nodenet.Config) *nodenet.Manager {
	t.Helper()
	var m *nodenet.Manager
	if err := ns.Do(func() (err error) {
		m, err = nodenet.NewHost(context.Background(), cfg, zaptest.NewLogger(t), metrics.NewSet())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestKernelTakeover runs the node networking for real in a node namespace,
// in each iptables backend, and checks it from a pod namespace.
func TestKernelTakeover(t *testing.T) {
	netnstest.Require(t, "iptables-nft", "iptables-legacy", "ip6tables-nft", "iptables-nft-save", "iptables-legacy-save")
	for _, backend := range []nodenet.Backend{nodenet.BackendNFT, nodenet.BackendLegacy} {
		t.Run(string(backend), func(t *testing.T) { testTakeover(t, backend) })
	}
}

func testTakeover(t *testing.T, backend nodenet.Backend) {
	topo := netnstest.NodePod(t)
	node, pod := topo.Node, topo.Pod
	// What kube-proxy would leave: its hint chain in the backend it uses,
	// and a DNAT for the ClusterIP to an endpoint that does not answer
	// (queries that reach it are lost, so an answer proves NOTRACK). The
	// MASQUERADE for the pod network keeps conntrack busy for everything else.
	ipt := "iptables-" + string(backend)
	node.Run(ipt, "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
	node.Run(ipt, "-t", "nat", "-A", "PREROUTING", "-d", clusterIP, "-p", "udp", "--dport", "53", "-j", "DNAT", "--to-destination", "10.244.9.9:53")
	node.Run(ipt, "-t", "nat", "-A", "PREROUTING", "-d", clusterIP, "-p", "tcp", "--dport", "53", "-j", "DNAT", "--to-destination", "10.244.9.9:53")
	node.Run(ipt, "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-j", "MASQUERADE")
	node.Run(ipt, "-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "DROP") // a strict host firewall

	// The frontend's listeners bind before the addresses exist.
	serveDNS(t, node, linkLocal+":53", clusterIP+":53", "["+linkLocal6+"]:53", netnstest.NodeVethIP+":5353")

	cfg := nodenet.Config{
		Mode:         nodenet.ModeIPTables,
		LocalIPs:     []net.IP{net.ParseIP(linkLocal).To4(), net.ParseIP(linkLocal6)},
		ServiceIPs:   []net.IP{net.ParseIP(clusterIP).To4()},
		HealthPort:   9254,
		SyncInterval: 300 * time.Millisecond,
	}
	m := newManager(t, node, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = node.Do(func() error { m.Run(ctx); return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 5*time.Second, "first sync", func() bool { ok, _ := m.Status(); return ok })
	// The pod's IPv6 route needs its link's own addresses through duplicate
	// address detection first; on a loaded machine the first query may
	// come before that (a timeout in one of several full-package runs).
	waitFor(t, 10*time.Second, "IPv6 path from the pod", func() bool {
		return query(pod, "udp", "["+linkLocal6+"]:53") == nil
	})

	for _, addr := range []string{linkLocal + ":53", clusterIP + ":53", "[" + linkLocal6 + "]:53"} {
		for _, network := range []string{"udp", "tcp"} {
			if err := query(pod, network, addr); err != nil {
				t.Errorf("pod query %s %s: %v", network, addr, err)
			}
		}
	}

	t.Run("interface", func(t *testing.T) {
		out := node.Run("ip", "-d", "-o", "link", "show", "nodedns")
		if !strings.Contains(out, "bridge") && !strings.Contains(out, "dummy") {
			t.Errorf("nodedns link: %s", out)
		}
		addrs := node.Run("ip", "-o", "addr", "show", "dev", "nodedns")
		for _, want := range []string{linkLocal + "/32", clusterIP + "/32", linkLocal6 + "/128"} {
			if !strings.Contains(addrs, want) {
				t.Errorf("no %s on nodedns: %s", want, addrs)
			}
		}
		if strings.Contains(addrs, "fe80") {
			t.Errorf("link-local IPv6 address on nodedns: %s", addrs)
		}
		// noprefixroute: the owned addresses add only local routes.
		for _, fam := range []string{"-4", "-6"} {
			if routes := node.Run("ip", fam, "route", "show", "table", "main", "dev", "nodedns"); strings.TrimSpace(routes) != "" {
				t.Errorf("routes via nodedns in the main table: %s", routes)
			}
		}
	})

	t.Run("conntrack", func(t *testing.T) {
		const n = 200
		before := conntrackCount(t, node)
		for i := range n {
			addr := []string{linkLocal + ":53", clusterIP + ":53"}[i%2]
			if err := query(pod, "udp", addr); err != nil {
				t.Fatalf("query %d to %s: %v", i, addr, err)
			}
		}
		after := conntrackCount(t, node)
		// Control: the same queries to an address nodedns does not own.
		for range 50 {
			_ = query(pod, "udp", netnstest.NodeVethIP+":5353")
		}
		control := conntrackCount(t, node)
		t.Logf("conntrack entries: %d before, %d after %d queries to owned IPs; %d after 50 queries to an unowned IP", before, after, n, control)
		if after-before > 2 {
			t.Errorf("conntrack grew by %d over %d queries", after-before, n)
		}
		if control-after < 40 {
			t.Errorf("control grew by only %d: conntrack not active, the test proves nothing", control-after)
		}
	})

	want := expectedSave(cfg)
	t.Run("rules exact", func(t *testing.T) {
		got := savedRules(t, node, backend)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("iptables-save:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		other := nodenet.BackendLegacy
		if backend == other {
			other = nodenet.BackendNFT
		}
		if got := savedRules(t, node, other); len(got) != 0 {
			t.Errorf("rules in the %s backend too: %q", other, got)
		}
		// Ours sit above the firewall's DROP.
		input := node.Run(ipt, "-S", "INPUT")
		if strings.Index(input, "-j DROP") < strings.LastIndex(input, nodenet.CommentPrefix) {
			t.Errorf("DROP before nodedns rules:\n%s", input)
		}
	})

	t.Run("restore after one sync", func(t *testing.T) {
		node.Run(ipt, "-t", "raw", "-D", "PREROUTING", "-d", clusterIP+"/32", "-p", "udp", "-m", "udp", "--dport", "53",
			"-m", "comment", "--comment", "nodedns: notrack udp to 10.96.0.10:53", "-j", "NOTRACK")
		node.Run(ipt, "-t", "raw", "-I", "PREROUTING", "-j", "ACCEPT")
		start := time.Now()
		waitFor(t, 3*cfg.SyncInterval, "rule restored", func() bool {
			return strings.Join(savedRules(t, node, backend), "\n") == strings.Join(want, "\n") &&
				strings.HasPrefix(strings.Split(node.Run(ipt, "-t", "raw", "-S", "PREROUTING"), "\n")[1], "-A PREROUTING -d ")
		})
		t.Logf("restored in %v (sync interval %v)", time.Since(start).Round(time.Millisecond), cfg.SyncInterval)
	})

	t.Run("a restart with another config removes what it does not want", func(t *testing.T) {
		cancel()
		<-done
		next := cfg
		next.ServiceIPs = []net.IP{net.ParseIP("10.96.0.53").To4()}
		m2 := newManager(t, node, next)
		if err := node.Do(func() error { return m2.RemoveStale(context.Background()) }); err != nil {
			t.Fatal(err)
		}
		rules := strings.Join(savedRules(t, node, backend), "\n")
		if strings.Contains(rules, clusterIP) || !strings.Contains(rules, linkLocal) {
			t.Errorf("after RemoveStale:\n%s", rules)
		}
		addrs := node.Run("ip", "-o", "addr", "show", "dev", "nodedns")
		if strings.Contains(addrs, clusterIP) || !strings.Contains(addrs, linkLocal) {
			t.Errorf("addresses after RemoveStale: %s", addrs)
		}
	})

	t.Run("teardown", func(t *testing.T) {
		if err := node.Do(func() error { return m.Teardown(context.Background()) }); err != nil {
			t.Fatal(err)
		}
		for _, b := range []nodenet.Backend{nodenet.BackendNFT, nodenet.BackendLegacy} {
			if got := savedRules(t, node, b); len(got) != 0 {
				t.Errorf("%s rules left: %q", b, got)
			}
		}
		if out, err := node.Exec("ip", "link", "show", "nodedns"); err == nil {
			t.Errorf("link left: %s", out)
		}
		if !strings.Contains(node.Run(ipt, "-S", "INPUT"), "-j DROP") {
			t.Error("foreign rule removed")
		}
	})
}

// expectedSave is what iptables-save prints for cfg's rules, in the
// order nodedns installs them, sorted like savedRules.
func expectedSave(cfg nodenet.Config) []string {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	var out []string
	for _, r := range nodenet.Rules(cfg) {
		bin := "iptables"
		if r.Family == nodenet.IPv6 {
			bin = "ip6tables"
		}
		// iptables-save adds the prefix length and the implicit protocol
		// match.
		var addr, dir, port, proto string
		for i := 0; i+1 < len(r.Spec); i += 2 {
			switch r.Spec[i] {
			case "-d", "-s":
				dir, addr = r.Spec[i], r.Spec[i+1]
			case "-p":
				proto = r.Spec[i+1]
			case "--dport", "--sport":
				port = r.Spec[i] + " " + r.Spec[i+1]
			}
		}
		plen := "/32"
		if r.Family == nodenet.IPv6 {
			plen = "/128"
		}
		out = append(out, fmt.Sprintf(`%s %s -A %s %s %s%s -p %s -m %s %s -m comment --comment "%s" -j %s`,
			bin, r.Table, r.Chain, dir, addr, plen, proto, proto, port, r.Comment, r.Spec[len(r.Spec)-1]))
	}
	sortByTable(out)
	return out
}

// sortByTable orders lines by binary and table, keeping the order within
// a table: iptables-legacy-save and iptables-nft-save print tables in
// different orders.
func sortByTable(lines []string) {
	key := func(l string) string {
		f := strings.Fields(l)
		return f[0] + " " + f[1]
	}
	sort.SliceStable(lines, func(i, j int) bool { return key(lines[i]) < key(lines[j]) })
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKernelModes checks what the other modes own: link-local takes only
// the link-local address; node-ip the node IP's rules and, given the
// ClusterIP, that address on the interface with its rules, else no
// interface.
func TestKernelModes(t *testing.T) {
	netnstest.Require(t, "iptables-nft", "iptables-nft-save", "iptables-legacy-save")
	for _, tc := range []struct {
		name      string
		mode      nodenet.Mode
		local     string
		service   string
		ask       []string // answered from the pod, without conntrack
		wantLink  bool
		notOwned  string
		wantRules int
	}{
		{"link-local", nodenet.ModeLinkLocal, linkLocal, clusterIP, []string{linkLocal}, true, clusterIP, 10},
		{"node-ip", nodenet.ModeNodeIP, netnstest.NodeVethIP, clusterIP, []string{netnstest.NodeVethIP, clusterIP}, true, linkLocal, 20},
		{"node-ip without ClusterIP", nodenet.ModeNodeIP, netnstest.NodeVethIP, "", []string{netnstest.NodeVethIP}, false, clusterIP, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := netnstest.NodePod(t)
			node, pod := topo.Node, topo.Pod
			node.Run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-j", "MASQUERADE")
			cfg := nodenet.Config{Mode: tc.mode, LocalIPs: []net.IP{net.ParseIP(tc.local).To4()}}
			if tc.service != "" {
				cfg.ServiceIPs = []net.IP{net.ParseIP(tc.service).To4()}
			}
			for _, a := range tc.ask {
				serveDNS(t, node, a+":53")
			}
			m := newManager(t, node, cfg)
			if err := node.Do(func() error { return m.Sync(context.Background()) }); err != nil {
				t.Fatal(err)
			}
			before := conntrackCount(t, node)
			for range 100 {
				for _, a := range tc.ask {
					if err := query(pod, "udp", a+":53"); err != nil {
						t.Fatalf("%s: %v", a, err)
					}
				}
			}
			if after := conntrackCount(t, node); after-before > 2 {
				t.Errorf("conntrack grew by %d", after-before)
			}
			_, err := node.Exec("ip", "link", "show", "nodedns")
			if (err == nil) != tc.wantLink {
				t.Errorf("nodedns link present = %v, want %v", err == nil, tc.wantLink)
			}
			rules := strings.Join(savedRules(t, node, nodenet.BackendNFT), "\n")
			if n := strings.Count(rules, "\n") + 1; n != tc.wantRules || strings.Contains(rules, tc.notOwned) {
				t.Errorf("%d rules, want %d without %s:\n%s", n, tc.wantRules, tc.notOwned, rules)
			}
			if err := node.Do(func() error { return m.Teardown(context.Background()) }); err != nil {
				t.Fatal(err)
			}
			if got := savedRules(t, node, nodenet.BackendNFT); len(got) != 0 {
				t.Errorf("rules left: %q", got)
			}
		})
	}
}

// TestKernelNodeIPClusterIP: in node-ip mode, once the nodedns pods are
// kube-dns's endpoints, kube-proxy DNATs a pod's query to the ClusterIP to
// its own node IP's port 53, the frontend, about half the time. The
// frontend's NOTRACK of answers from that port keeps such an answer from
// conntrack's reverse NAT: it reaches the pod from the node IP, and the
// pod's socket, connected to the ClusterIP, drops it. Owning the ClusterIP
// (ServiceIPs) answers it on the node, untracked, never DNATed; after
// Teardown the DNAT answers it again (fail-open).
func TestKernelNodeIPClusterIP(t *testing.T) {
	netnstest.Require(t, "iptables-nft", "iptables-nft-save", "iptables-legacy-save")
	for _, owned := range []bool{false, true} {
		t.Run(fmt.Sprintf("ClusterIP owned=%v", owned), func(t *testing.T) {
			topo := netnstest.NodePod(t)
			node, pod := topo.Node, topo.Pod
			// kube-proxy's DNAT of the ClusterIP to this node's endpoint.
			for _, proto := range []string{"udp", "tcp"} {
				node.Run("iptables-nft", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP, "-p", proto, "--dport", "53",
					"-j", "DNAT", "--to-destination", netnstest.NodeVethIP+":53")
			}
			// The frontend listens on every address it may own.
			serveDNS(t, node, netnstest.NodeVethIP+":53", clusterIP+":53")
			cfg := nodenet.Config{Mode: nodenet.ModeNodeIP, IPTables: nodenet.BackendNFT, LocalIPs: []net.IP{net.ParseIP(netnstest.NodeVethIP).To4()}}
			if owned {
				cfg.ServiceIPs = []net.IP{net.ParseIP(clusterIP).To4()}
			}
			m := newManager(t, node, cfg)
			t.Cleanup(func() { _ = node.Do(func() error { return m.Teardown(context.Background()) }) })
			// Before the takeover: the DNAT answers, tracked both ways.
			for _, proto := range []string{"udp", "tcp"} {
				if err := query(pod, proto, clusterIP+":53"); err != nil {
					t.Fatalf("%s before the takeover, through the DNAT: %v", proto, err)
				}
			}
			if err := node.Do(func() error { return m.Sync(context.Background()) }); err != nil {
				t.Fatal(err)
			}
			// A new flow each query (a new source port): an entry from
			// before binds none of them.
			var lost []string
			n := 20
			if !owned {
				n = 3 // each lost query waits out query's 2 s timeout
			}
			before := conntrackCount(t, node)
			for i := range n {
				for _, proto := range []string{"udp", "tcp"} {
					if err := query(pod, proto, clusterIP+":53"); err != nil {
						lost = append(lost, fmt.Sprintf("%s #%d: %v", proto, i, err))
					}
				}
				if err := query(pod, "udp", netnstest.NodeVethIP+":53"); err != nil {
					t.Fatalf("node IP: %v", err)
				}
			}
			grew := conntrackCount(t, node) - before
			if !owned {
				// The loss this mode had: every query DNATed to the node IP.
				if len(lost) != 2*n {
					t.Errorf("without the ClusterIP owned, %d of %d ClusterIP queries lost, want all (the answer from the node IP escapes the reverse NAT): %q", len(lost), 2*n, lost)
				}
				return
			}
			if len(lost) > 0 {
				t.Errorf("%d of %d ClusterIP queries lost: %q", len(lost), 2*n, lost)
			}
			if grew > 2 {
				t.Errorf("conntrack grew by %d over 60 queries answered on the node", grew)
			}
			if err := node.Do(func() error { return m.Teardown(context.Background()) }); err != nil {
				t.Fatal(err)
			}
			if _, err := node.Exec("ip", "link", "show", "nodedns"); err == nil {
				t.Error("Teardown left the nodedns link")
			}
			// Fail-open: the ClusterIP is not local any more, the DNAT
			// sends the query to the endpoint and reverses the answer.
			for _, proto := range []string{"udp", "tcp"} {
				if err := query(pod, proto, clusterIP+":53"); err != nil {
					t.Errorf("%s after Teardown, through the DNAT: %v", proto, err)
				}
			}
		})
	}
}
