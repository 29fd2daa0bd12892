package testbed

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestNodes runs the real kube-proxy in two node namespaces, one per mode,
// and checks that each programs the kube-dns ClusterIP's DNAT rules from a
// Service and a hand-made EndpointSlice. It also attaches a namespace the
// test made itself, which must survive Stop without the testbed's veth.
func TestNodes(t *testing.T) {
	if r := UnavailableNodes(); r != "" {
		t.Skip("testbed: " + r)
	}
	// Registered before StartForTest, so this cleanup runs after Stop.
	attached := "nodedns-attach-" + randomToken()[:8]
	if out, err := exec.Command("ip", "netns", "add", attached).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		out, err := exec.Command("ip", "-n", attached, "link", "show", NodeInterface).CombinedOutput()
		if err == nil {
			t.Errorf("%s still in netns %s after Stop:\n%s", NodeInterface, attached, out)
		}
		if out, err := exec.Command("ip", "netns", "delete", attached).CombinedOutput(); err != nil {
			t.Errorf("attached netns %s gone after Stop (or delete failed): %v: %s", attached, err, out)
		}
	})

	tb := StartForTest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel) // not defer: the parallel subtests run after this function returns

	const endpointIP = "10.244.1.5"
	svc, eps := kubeDNS(endpointIP, "node-iptables")
	if _, err := tb.Client().CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Client().DiscoveryV1().EndpointSlices(eps.Namespace).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		mode ProxyMode
		want []string // in iptables-save or nft list ruleset
	}{
		{ProxyModeIPTables, []string{
			"-d " + DNSServiceIP + "/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\"",
			"-d " + DNSServiceIP + "/32 -p tcp -m comment --comment \"kube-system/kube-dns:dns-tcp cluster IP\"",
			"-p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination " + endpointIP + ":53",
			"-p tcp -m comment --comment \"kube-system/kube-dns:dns-tcp\" -m tcp -j DNAT --to-destination " + endpointIP + ":53",
		}},
		{ProxyModeNFTables, []string{
			DNSServiceIP + " . udp . 53 : goto service-",
			DNSServiceIP + " . tcp . 53 : goto service-",
			"meta l4proto udp dnat ip to numgen random mod 1 map { 0 : " + endpointIP + " . 53 }",
			"meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : " + endpointIP + " . 53 }",
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			node, err := tb.AddNode(ctx, "node-"+string(tt.mode), "")
			if err != nil {
				t.Fatal(err)
			}
			kp, err := tb.StartKubeProxy(ctx, node, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			rules, err := kp.WaitForRules(ctx, tt.want...)
			if err != nil {
				t.Fatalf("%v\nruleset:\n%s", err, rules)
			}
			if err := kp.Stop(); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("attach existing netns", func(t *testing.T) {
		t.Parallel()
		node, err := tb.AddNode(ctx, "node-attached", attached)
		if err != nil {
			t.Fatal(err)
		}
		out, err := node.Run(ctx, "ip", "-4", "addr", "show", NodeInterface)
		if err != nil || !strings.Contains(string(out), node.IP.String()+"/24") {
			t.Errorf("%s in %s: %v\n%s", NodeInterface, attached, err, out)
		}
		// The relay answers at NodeGateway from inside the node namespace.
		port := strconv.Itoa(tb.port)
		if out, err := node.Run(ctx, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", NodeGateway, port)); err != nil {
			t.Errorf("connect to %s:%s from the node: %v\n%s", NodeGateway, port, err, out)
		}
		n, err := tb.Client().CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != node.IP.String() {
			t.Errorf("Node addresses = %v, want InternalIP %s", n.Status.Addresses, node.IP)
		}
		path, err := tb.NodeKubeconfig(ctx, tb.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; got != tb.NodeURL() {
			t.Errorf("NodeKubeconfig server = %s, want %s", got, tb.NodeURL())
		}
	})
}
