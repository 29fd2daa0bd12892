package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/testbed"
)

// The dual-stack shape: a kubeadm cluster built dual-stack (kube-apiserver
// with an IPv6 secondary Service range, nodes with IPv4 and IPv6
// addresses and PodCIDRs), whose kube-dns is PreferDualStack, as kubeadm
// leaves it when the cluster is dual-stack at init. Kubelet's clusterDNS
// stays the IPv4 ClusterIP (kubeadm's default); a second client per node
// names the IPv6 ClusterIP, and every client resolves a dual-stack Service
// to its IPv6 address (AAAA) besides the usual checks.

// dualStackWeb is the dual-stack Service the shape's clients resolve.
const dualStackWeb = "web-ds"

// dualStackV6Group is the group of the clients that name kube-dns's IPv6
// ClusterIP.
const dualStackV6Group = "dual-stack-v6"

// dualStackDeploy makes kube-dns dual-stack, checks what a dual-stack
// cluster must have (both families on the Nodes and pods), adds the
// dual-stack Service's check and starts the clients that name the IPv6
// ClusterIP.
func dualStackDeploy(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	c := r.tb.Client()
	for _, n := range r.nodes {
		node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.IP6 == nil || len(node.Spec.PodCIDRs) != 2 {
			t.Fatalf("%s: not dual-stack (IPv6 %v, podCIDRs %v): TestShapes starts a dual-stack cluster when a selected shape needs one", n.Name, n.IP6, node.Spec.PodCIDRs)
		}
	}
	kubectl(ctx, t, r.tb, "-n", "kube-system", "patch", "service", "kube-dns", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"ipFamilyPolicy":"PreferDualStack","clusterIPs":[%q,%q]}}`, testbed.DNSServiceIP, testbed.DNSServiceIP6))
	pol := corev1.IPFamilyPolicyPreferDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dualStackWeb},
		Spec: corev1.ServiceSpec{
			Selector:       map[string]string{"app": "web"},
			Ports:          []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			IPFamilyPolicy: &pol,
		},
	}
	got, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = c.CoreV1().Services("default").Get(ctx, dualStackWeb, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	var v6 string
	for _, ip := range got.Spec.ClusterIPs {
		if p := net.ParseIP(ip); p != nil && p.To4() == nil {
			v6 = ip
		}
	}
	if v6 == "" {
		t.Fatalf("service %s: ClusterIPs %v, want an IPv6 one", dualStackWeb, got.Spec.ClusterIPs)
	}
	if err := testbed.WaitDeploymentReady(ctx, c, "kube-system", "coredns"); err != nil {
		t.Fatal(err)
	}
	base := r.checks
	r.checks = append(slices.Clone(base), dualStackWeb+"="+v6)
	t.Cleanup(func() { r.checks = base })
	t.Cleanup(func() {
		kubectl(context.Background(), t, r.tb, "delete", "pods", "-l", "nodedns.test/client="+dualStackV6Group, "--wait=false")
	})
	for _, n := range r.nodes {
		startClientNaming(ctx, t, r.tb, r.results, dualStackV6Group, "client-dual-stack-v6-"+n.Name, n.Name, testbed.DNSServiceIP6, r.checks)
	}
	// The clients' pods have an address of each family.
	for _, n := range r.nodes {
		pod, err := c.CoreV1().Pods("default").Get(ctx, "client-dual-stack-v6-"+n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Status.PodIPs) != 2 {
			t.Errorf("%s: podIPs %v, want one of each family", pod.Name, pod.Status.PodIPs)
		}
	}
	t.Logf("dual-stack: kube-dns %s and %s, %s=%s, nodes' podCIDRs set", testbed.DNSServiceIP, testbed.DNSServiceIP6, dualStackWeb, v6)
}

// dualStackAtEnd checks, with CoreDNS given back, that kube-dns still
// has both ClusterIPs: nodedns changed neither.
func dualStackAtEnd(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	svc, err := r.tb.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svc.Spec.ClusterIPs, []string{testbed.DNSServiceIP, testbed.DNSServiceIP6}) {
		t.Errorf("kube-dns ClusterIPs %v after the uninstall, want [%s %s]", svc.Spec.ClusterIPs, testbed.DNSServiceIP, testbed.DNSServiceIP6)
	}
}

// dualStackSources asks node-a's fallback listener on its IPv6 address
// from node-b, from an address of node-b's IPv6 pod network (global
// unicast, testbed.PodSubnet6) and from one outside every network of the
// cluster, both routed between the two nodes: the chart's default policy
// ([local, nodes]: the Nodes' spec.podCIDRs) answers the first and
// refuses the second. The clients' own lookups (global unicast pods
// asking their frontend's IPv6 ClusterIP) are the frontend's side.
func dualStackSources(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	a, b := r.nodes[0], r.nodes[1]
	_, podNet, err := net.ParseCIDR(b.PodCIDR6)
	if err != nil {
		t.Fatal(err)
	}
	inside := slices.Clone(podNet.IP.To16())
	inside[15] = 0xfa // high in node-b's range: no pod of this test gets it
	outside := net.ParseIP("2001:db8:ffff::fa")
	for _, ip := range []net.IP{inside, outside} {
		if _, err := b.Run(ctx, "ip", "-6", "addr", "add", ip.String()+"/128", "dev", "lo", "nodad"); err != nil {
			t.Fatal(err)
		}
	}
	// node-a answers the outside address through node-b, as a peered
	// network would route it.
	if _, err := a.Run(ctx, "ip", "-6", "route", "replace", outside.String()+"/128", "via", b.IP6.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ip := range []net.IP{inside, outside} {
			_, _ = b.Run(context.Background(), "ip", "-6", "addr", "del", ip.String()+"/128", "dev", "lo")
		}
		_, _ = a.Run(context.Background(), "ip", "-6", "route", "del", outside.String()+"/128")
	})
	server := net.JoinHostPort(a.IP6.String(), "53")
	ask := func(from net.IP) (int, error) { return askFrom(b.Netns, from, server) }
	for _, c := range []struct {
		from net.IP
		want int
		what string
	}{
		{inside, dns.RcodeSuccess, "node-b's IPv6 pod network (global unicast, in its spec.podCIDRs)"},
		{outside, dns.RcodeRefused, "outside every network of the cluster"},
	} {
		var rc int
		var err error
		// The listener may still be opening on a pod that just turned ready.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if rc, err = ask(c.from); (err == nil && rc == c.want) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || rc != c.want {
			t.Errorf("node-a's fallback listener [%s]:53 asked from %s (%s): rcode %d, %v; want %s", a.IP6, c.from, c.what, rc, err, dns.RcodeToString[c.want])
		} else {
			t.Logf("node-a's fallback listener [%s]:53 asked from %s (%s): %s", a.IP6, c.from, c.what, dns.RcodeToString[rc])
		}
	}
}
