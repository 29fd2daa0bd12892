package nodenet_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/testbed"
)

// TestE2EKubeProxy runs the real kube-proxy (iptables and nftables modes)
// in the node namespace, with kube-dns's ClusterIP pointing at the other
// node's backend. While nodedns owns the ClusterIP, the pod's queries are
// answered locally and create no conntrack entry; after teardown they reach
// the other node through kube-proxy's DNAT.
func TestE2EKubeProxy(t *testing.T) {
	if r := testbed.UnavailableNodes(); r != "" {
		t.Skip("testbed: " + r)
	}
	modes := []testbed.ProxyMode{testbed.ProxyModeIPTables, testbed.ProxyModeNFTables}
	// The namespaces come first so that their cleanup runs after the
	// testbed's, which removes its veth from them.
	clusters := make([]*cluster, len(modes))
	for i := range modes {
		clusters[i] = newClusterDNAT(t, false)
	}
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	createKubeDNS(ctx, t, tb)
	for i, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			c := clusters[i]
			node, err := tb.AddNode(ctx, fmt.Sprintf("nodedns-e2e-%d", i), c.node.Name)
			if err != nil {
				t.Fatal(err)
			}
			kp, err := tb.StartKubeProxy(ctx, node, mode)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = kp.Stop() })
			want := "--to-destination " + node2IP + ":53"
			if mode == testbed.ProxyModeNFTables {
				want = node2IP + " . 53"
			}
			if rules, err := kp.WaitForRules(ctx, want); err != nil {
				t.Fatalf("%v\n%s", err, rules)
			}
			// kube-proxy alone: the other node answers, through conntrack.
			if got, err := ask(c.pod, "udp", clusterIP+":53", "before.example.", 2*time.Second); err != nil || got != remoteAns {
				t.Fatalf("before nodedns: %q, %v; want %s through kube-proxy", got, err, remoteAns)
			}
			c.backend.ready.Store(true)
			fe := c.start(t)
			waitFor(t, 15*time.Second, "/ready 200", func() bool {
				code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
				return code == http.StatusOK
			})
			before := conntrackCount(t, c.node)
			for i := range 500 {
				got, err := ask(c.pod, "udp", clusterIP+":53", fmt.Sprintf("q%d.example.", i%50), time.Second)
				if err != nil || got != localAns {
					t.Fatalf("query %d with nodedns: %q, %v; want the local %s", i, got, err, localAns)
				}
			}
			after := conntrackCount(t, c.node)
			t.Logf("FIGURE kube-proxy %s: conntrack %d before, %d after 500 UDP queries to the ClusterIP answered locally", mode, before, after)
			if after-before > 2 {
				t.Errorf("conntrack grew by %d", after-before)
			}
			_ = fe.Process.Signal(syscall.SIGTERM)
			_ = fe.Wait()
			if c.linkExists() || len(c.nodednsRules(t)) != 0 {
				t.Fatal("interface or rules left after teardown")
			}
			before = conntrackCount(t, c.node)
			for i := range 100 {
				got, err := ask(c.pod, "udp", clusterIP+":53", fmt.Sprintf("after%d.example.", i), 2*time.Second)
				if err != nil || got != remoteAns {
					t.Fatalf("after teardown: %q, %v; want the other node's %s through kube-proxy's DNAT", got, err, remoteAns)
				}
			}
			t.Logf("FIGURE kube-proxy %s after teardown: conntrack %d before, %d after 100 UDP queries through the DNAT", mode, before, conntrackCount(t, c.node))
		})
	}
}

// createKubeDNS creates the kube-dns Service and an EndpointSlice whose one
// endpoint is the other node's backend.
func createKubeDNS(ctx context.Context, t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if _, err := tb.Client().CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, port := true, int32(53)
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dnsName, dnsTCP := "dns", "dns-tcp"
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-other-node", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "nodedns-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{node2IP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: &dnsName, Port: &port, Protocol: &udp},
			{Name: &dnsTCP, Port: &port, Protocol: &tcp},
		},
	}
	if _, err := tb.Client().DiscoveryV1().EndpointSlices(eps.Namespace).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
