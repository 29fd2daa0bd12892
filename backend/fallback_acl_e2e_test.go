package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// Addresses of the fallback test's topology. The node's own address is a
// public one (TEST-NET-3, RFC 5737), the case where an open fallback
// listener would be an amplifier: the outside client can reach it, through
// a gateway (its router's address on the node's network). Nothing leaves
// the namespaces the test makes.
const (
	aclNodeIP    = "203.0.113.10" // the node IP (status.hostIP), on the node's eth0
	aclGatewayIP = "203.0.113.7"  // the outside host's router on the node's network
	aclOutsideIP = "198.51.100.7" // a host outside every allowed network, behind it
)

// fallbackBlock returns the fallback server block of a Corefile: from its
// key to the end of the file, where the default Corefile keeps it.
func fallbackBlock(t testing.TB, corefile string) string {
	t.Helper()
	const key = "\n.:{$NODEDNS_FALLBACK_PORT} {\n"
	i := strings.Index(corefile, key)
	if i < 0 {
		t.Fatalf("no %q server block in the Corefile", strings.TrimSpace(key))
	}
	return corefile[i:]
}

// TestFallbackListenerNotOpenResolver runs the backend with the default
// Corefile in a node namespace whose fallback listener is bound to the
// node IP, as the chart sets it, and asks it from a pod address (in the
// allowed networks) and from an outside address (in none): the pod is
// answered, the outside client is REFUSED and nothing it asks reaches the
// upstream; the fallback port is closed on the node's other addresses,
// and of the HTTP listeners only /metrics is on the node IP.
func TestFallbackListenerNotOpenResolver(t *testing.T) {
	if testing.Short() {
		t.Skip("kernel test; -short given")
	}
	netnstest.Require(t)
	topo := netnstest.NodePod(t) // the pod: 10.244.1.2, the node's end of its veth: 10.244.1.1
	node, pod := topo.Node, topo.Pod
	outside := netnstest.New(t, "outside")
	netnstest.Link(t, node, "eth0", []string{aclNodeIP + "/24"}, outside, "eth0", []string{aclGatewayIP + "/24"})
	// The outside host asks from an address the node reaches only through
	// a gateway: a neighbour on the node's own subnet is local, as for
	// the frontend (docs/security.md).
	outside.Run("ip", "addr", "add", aclOutsideIP+"/32", "dev", "lo")
	outside.Run("ip", "route", "replace", "203.0.113.0/24", "dev", "eth0", "src", aclOutsideIP)
	node.Run("ip", "route", "add", aclOutsideIP+"/32", "via", aclGatewayIP)
	// The outside client may also try the node's pod-network address.
	outside.Run("ip", "route", "add", "10.244.0.0/16", "via", aclNodeIP, "src", aclOutsideIP)

	// The upstream resolver of the node (resolv.conf's), inside the node.
	var fwd atomic.Int64
	var upAddr string
	if err := node.Do(func() error {
		upAddr = fakeUpstream(t, &fwd).Addr
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The default Corefile with two changes in the main block, none in the
	// fallback block (smokeCorefile): the kubernetes stanza becomes hosts
	// and template stanzas (it needs an API server, and the fallback's
	// nodedns_acl and bind do not depend on it: the fallback relays to the
	// main block only what nodedns_acl let through), and lameduck is
	// shortened so that the test stops in a moment. NODEDNS_FALLBACK_ALLOW
	// keeps its default, local,nodes: nodes has no API server here (its
	// sets are TestNodeSet's and TestNodesWatch's, ./backend/srcacl), so
	// this is local's half: the pod on its veth is answered, a host behind
	// a gateway is not.
	core := smokeCorefile(t)
	if fb := fallbackBlock(t, string(defaultCorefile)); fallbackBlock(t, core) != fb {
		t.Fatalf("the test's fallback block differs from the default's:\n%s", fallbackBlock(t, core))
	}
	const (
		health  = "127.0.0.1:9155"
		ready   = "127.0.0.1:8181"
		metrics = aclNodeIP + ":9153"
	)
	env := []string{
		"NODEDNS_BIND=127.0.0.1",
		"NODEDNS_PORT=5300",
		"NODEDNS_FALLBACK_PORT=5301",
		"NODEDNS_FALLBACK_BIND=" + aclNodeIP, // the chart: $(NODEDNS_NODE_IP)
		"NODEDNS_UPSTREAM=" + upAddr,
		// The chart: health and ready on the probe address (loopback),
		// metrics on the node IP for Prometheus.
		"NODEDNS_HEALTH=" + health,
		"NODEDNS_READY=" + ready,
		"NODEDNS_METRICS=" + metrics,
	}
	proc := startInNetns(t, node, core, env)
	fallback := net.JoinHostPort(aclNodeIP, "5301")
	waitNetnsReady(t, node, proc, "http://"+ready+"/ready", fallback, 30*time.Second)

	const n = 20 // queries per client and transport
	q := func(ns *netnstest.NetNS, network, addr string) (*dns.Msg, error) {
		var r *dns.Msg
		err := ns.Do(func() (err error) {
			c := &dns.Client{Net: network, Timeout: 2 * time.Second}
			r, _, err = c.Exchange(queryFor("fwd.example.", dns.TypeA), addr)
			return err
		})
		return r, err
	}

	// Outside first, so that the upstream's count shows that nothing of it
	// was relayed (the main block's cache could hide it otherwise).
	var refused, unanswered int
	for _, network := range []string{"udp", "tcp"} {
		for i := range n {
			r, err := q(outside, network, fallback)
			switch {
			case err != nil:
				unanswered++
			case r.Rcode == dns.RcodeRefused && len(r.Answer) == 0:
				refused++
			default:
				t.Errorf("outside %s query %d to %s: %s with %d answers, want REFUSED or none", network, i, fallback, dns.RcodeToString[r.Rcode], len(r.Answer))
			}
		}
	}
	t.Logf("from %s to %s: %d of %d REFUSED, %d unanswered", aclOutsideIP, fallback, refused, 2*n, unanswered)
	if got := fwd.Load(); got != 0 {
		t.Errorf("the upstream saw %d queries from the outside client, want 0", got)
	}

	var answered int
	for _, network := range []string{"udp", "tcp"} {
		for i := range n {
			r, err := q(pod, network, fallback)
			switch {
			case err != nil:
				t.Errorf("pod %s query %d to %s: %v", network, i, fallback, err)
			case r.Rcode != dns.RcodeSuccess || firstA(r) != "192.0.2.1":
				t.Errorf("pod %s query %d to %s: %s %v, want NOERROR A 192.0.2.1", network, i, fallback, dns.RcodeToString[r.Rcode], r.Answer)
			default:
				answered++
			}
		}
	}
	t.Logf("from %s to %s: %d of %d answered NOERROR", netnstest.PodIP, fallback, answered, 2*n)
	if fwd.Load() == 0 {
		t.Errorf("the pod's queries were answered without reaching the upstream")
	}

	// The fallback port on the node's other addresses: nothing listens.
	for _, c := range []struct {
		who  string
		ns   *netnstest.NetNS
		addr string
	}{
		{"pod", pod, net.JoinHostPort(netnstest.NodeVethIP, "5301")},
		{"outside", outside, net.JoinHostPort(netnstest.NodeVethIP, "5301")},
		{"node", node, "127.0.0.1:5301"},
	} {
		for _, network := range []string{"udp", "tcp"} {
			if r, err := q(c.ns, network, c.addr); err == nil {
				t.Errorf("%s: %s query to %s answered %s; the fallback must listen on the node IP only", c.who, network, c.addr, dns.RcodeToString[r.Rcode])
			}
		}
	}

	// HTTP from the pod at the node IP: /metrics is meant to be there (the
	// chart binds it to the node IP for Prometheus), health and ready not
	// (they are on loopback for the kubelet).
	code, body, err := netnsGet(pod, "http://"+metrics+"/metrics")
	if err != nil || code != 200 {
		t.Errorf("pod: GET %s/metrics: %d %v, want 200", metrics, code, err)
	}
	v, ok := metricValue(body, "coredns_dns_responses_total", `rcode="REFUSED"`, ":5301")
	t.Logf("coredns_dns_responses_total of the fallback server, rcode REFUSED: %s", v)
	if !ok || v != fmt.Sprint(refused) {
		t.Errorf("fallback REFUSED responses in /metrics: %q (found %v), want %d", v, ok, refused)
	}
	v, ok = metricValue(body, "nodedns_backend_denied_total", ":5301")
	t.Logf("nodedns_backend_denied_total of the fallback server: %s", v)
	if !ok || v != fmt.Sprint(refused) {
		t.Errorf("nodedns_backend_denied_total in /metrics: %q (found %v), want %d", v, ok, refused)
	}
	// No API server here: nodes is off, and the log says so.
	if out := proc.Output.String(); !strings.Contains(out, "no API server") {
		t.Errorf("the backend did not log that nodes has no API server:\n%s", out)
	}
	for _, port := range []string{"9155", "8181"} {
		url := "http://" + net.JoinHostPort(aclNodeIP, port) + "/"
		if code, _, err := netnsGet(pod, url); err == nil {
			t.Errorf("pod: GET %s answered %d; health and ready must stay on loopback", url, code)
		}
	}
	if code, _, err := netnsGet(pod, "http://"+net.JoinHostPort(netnstest.NodeVethIP, "9153")+"/metrics"); err == nil {
		t.Errorf("pod: /metrics answered %d on the node's pod-network address; it belongs on the node IP only", code)
	}
}

// queryFor is a recursive query for name and qtype.
func queryFor(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// startInNetns runs the backend with corefile and env inside ns. The
// process is stopped when the test ends, before ns is deleted.
func startInNetns(t *testing.T, ns *netnstest.NetNS, corefile string, env []string) *proctest.Process {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	inner := backendCommand(context.Background(), "-conf", conf)
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, inner.Path}, inner.Args[1:]...)...)
	cmd.Env = inner.Env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, env...)
	return proctest.Start(t, "backend", cmd)
}

// waitNetnsReady waits until, inside ns, readyURL answers 200 and dnsAddr
// accepts TCP connections.
func waitNetnsReady(t *testing.T, ns *netnstest.NetNS, p *proctest.Process, readyURL, dnsAddr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.Done():
			t.Fatalf("backend exited: %v\n%s", p.Err(), p.Output.String())
		default:
		}
		code, _, err := netnsGet(ns, readyURL)
		if err == nil && code == 200 && ns.Do(func() error {
			c, err := net.DialTimeout("tcp", dnsAddr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend not ready after %v: %s: %d %v\n%s", timeout, readyURL, code, err, p.Output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// netnsGet fetches url from inside ns with one HTTP/1.0 request on a
// connection dialled there (a client's own dial would run on another
// thread, outside ns).
func netnsGet(ns *netnstest.NetNS, url string) (code int, body string, err error) {
	hostport, path, ok := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	if !ok {
		return 0, "", fmt.Errorf("bad URL %q", url)
	}
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", hostport, time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /%s HTTP/1.0\r\nHost: x\r\n\r\n", path); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return resp.StatusCode, b.String(), err
	}
	return resp.StatusCode, b.String(), nil
}
