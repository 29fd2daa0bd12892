package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/testbed"
)

// TestFallbackNodesSource runs the chart with its default
// fallback.allowedNetworks, [local, nodes], on two real nodes in iptables
// mode and asks node-a's fallback listener (node-a's IP, port 53) from
// node-b, from an address of node-b's pod network that node-a reaches only
// through node-b: not local to node-a, so only nodes' pod CIDRs can admit
// it. The testbed's Nodes name no pod CIDR (kube-controller-manager runs
// with --allocate-node-cidrs=false, as where the CNI allocates pod
// addresses itself): the source is REFUSED, counted, and node-a's backend
// reports nodedns_backend_node_networks{kind="pod_cidrs"} 0. Then node-b's
// spec.podCIDRs is set to its pod network, as kube-controller-manager's
// allocator would: the backend's watch takes it, the same source is
// answered and pod_cidrs is 1.
func TestFallbackNodesSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	imgs := buildNodeImages(ctx, t, false)
	tb, nodes, _ := kubeadmCluster(ctx, t, imgs)
	c := tb.Client()
	for _, n := range nodes {
		node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: spec.podCIDRs %q, status.addresses %v; its pods use %s", n.Name, node.Spec.PodCIDRs, node.Status.Addresses, n.PodCIDR)
		if len(node.Spec.PodCIDRs) > 0 || node.Spec.PodCIDR != "" {
			t.Fatalf("%s names pod CIDRs %q: the testbed allocates them now; the test's first half assumes none", n.Name, node.Spec.PodCIDRs)
		}
	}
	chrt, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	values := chartValues(imgs.frontend, "iptables", false, map[string]any{})
	// The chart's default fallback.allowedNetworks, [local, nodes].
	values["fallback"] = map[string]any{"clusterIP": "10.96.0.11"}
	in := action.NewInstall(helmConfig(t, tb))
	in.ReleaseName, in.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	in.Timeout = 5 * time.Minute
	if _, err := in.RunWithContext(ctx, chrt, values); err != nil {
		t.Fatalf("helm install: %v\n%s", err, podStates(ctx, tb))
	}
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "nodedns", int32(len(nodes))); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}

	a, b := nodes[0], nodes[1]
	_, bNet, err := net.ParseCIDR(b.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	src := make(net.IP, 4)
	copy(src, bNet.IP.To4())
	src[3] = 250 // high in node-b's range: no pod of this test gets it
	if _, err := b.Run(ctx, "ip", "addr", "add", src.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.Run(context.Background(), "ip", "addr", "del", src.String()+"/32", "dev", "lo") })
	fallback := net.JoinHostPort(a.IP.String(), "53")
	ask := func(from net.IP) (int, error) { return askFrom(b.Netns, from, fallback) }
	metric := func(name, label string) (float64, bool) {
		out, err := a.Run(ctx, "curl", "-sf", "--max-time", "5", "http://"+a.IP.String()+":9153/metrics")
		if err != nil {
			t.Logf("%s: metrics: %v", a.Name, err)
			return 0, false
		}
		var sum float64
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, label) {
				continue
			}
			var v float64
			if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
				sum += v
				found = true
			}
		}
		return sum, found
	}

	// No pod CIDR known: only node addresses (and local) are answered.
	if rc, err := ask(b.IP); err != nil || rc != dns.RcodeSuccess {
		t.Errorf("from node-b's address %s: rcode %d, %v; want an answer (a Node address)", b.IP, rc, err)
	}
	if rc, err := ask(src); err != nil || rc != dns.RcodeRefused {
		t.Errorf("from %s in node-b's pod network, no pod CIDR on the Nodes: rcode %d, %v; want REFUSED", src, rc, err)
	}
	if v, ok := metric("nodedns_backend_node_networks", `kind="pod_cidrs"`); !ok || v != 0 {
		t.Errorf(`%s: nodedns_backend_node_networks{kind="pod_cidrs"} = %v (found %v), want 0`, a.Name, v, ok)
	}
	denied, _ := metric("nodedns_backend_denied_total", "")
	if denied < 1 {
		t.Errorf("%s: nodedns_backend_denied_total = %v after a refusal, want at least 1", a.Name, denied)
	}

	// node-b's pod CIDR set, as kube-controller-manager's allocator sets it.
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, b.PodCIDR, b.PodCIDR)
	patched := time.Now()
	if _, err := c.CoreV1().Nodes().Patch(ctx, b.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var answeredAfter time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if rc, err := ask(src); err == nil && rc == dns.RcodeSuccess {
			answeredAfter = time.Since(patched)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("from %s: not answered 30 s after node-b's spec.podCIDRs was set to %s", src, b.PodCIDR)
		}
	}
	if v, ok := metric("nodedns_backend_node_networks", `kind="pod_cidrs"`); !ok || v != 1 {
		t.Errorf(`%s: nodedns_backend_node_networks{kind="pod_cidrs"} = %v (found %v), want 1`, a.Name, v, ok)
	}
	t.Logf("FIGURE nodes source on real nodes: no pod CIDR on the Nodes, %s (node-b's pod network) REFUSED by node-a's fallback listener; answered %s after node-b's spec.podCIDRs was set",
		src, answeredAfter.Round(10*time.Millisecond))
}

// askFrom asks server (host:port) for kubernetes.default's A record over
// UDP from the address from, inside the network namespace netns, and
// returns the answer's rcode (-1 when none came).
func askFrom(netns string, from net.IP, server string) (int, error) {
	rcode := -1
	err := netnstest.Namespace{Name: netns}.Do(func() error {
		cl := &dns.Client{Net: "udp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: from}, Timeout: 2 * time.Second}}
		m := new(dns.Msg)
		m.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		r, _, err := cl.Exchange(m, server)
		if err == nil {
			rcode = r.Rcode
		}
		return err
	})
	return rcode, err
}
