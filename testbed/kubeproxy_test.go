package testbed

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeProxy runs the real kube-proxy in two node namespaces, one per
// mode, and checks that each programs the kube-dns ClusterIP's DNAT rules
// from a Service and a hand-made EndpointSlice.
func TestKubeProxy(t *testing.T) {
	if r := UnavailableNodes(); r != "" {
		t.Skip("testbed: " + r)
	}
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
}
