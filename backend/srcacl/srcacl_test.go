package srcacl

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/frontend/srcpolicy"
)

func node(name string, podCIDRs []string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDRs = podCIDRs
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	for i, a := range addrs {
		t := corev1.NodeInternalIP
		if i == 1 {
			t = corev1.NodeExternalIP
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: t, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	// what slim drops
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	return n
}

// TestNodeSet: pod CIDRs of both families (an IPv6 global-unicast one
// among them) and node addresses are answered; what lies beside them, a
// hostname "address" and a malformed CIDR are not.
func TestNodeSet(t *testing.T) {
	bad := node("bad", []string{"not-a-cidr"}, "garbage")
	s := buildSet([]*corev1.Node{
		node("a", []string{"10.244.1.0/24", "2600:1f14:abc:de01::/80"}, "192.0.2.11", "203.0.113.11"),
		node("b", []string{"10.244.2.0/24", "2600:1f14:abc:de02::/80"}, "192.0.2.12", "2001:db8:0:1::12"),
		bad,
	})
	if s.podCIDRs != 4 || len(s.addrs) != 4 || s.nodes != 3 {
		t.Errorf("set: %d pod CIDRs, %d addresses, %d nodes; want 4, 4, 3", s.podCIDRs, len(s.addrs), s.nodes)
	}
	for a, want := range map[string]bool{
		"10.244.1.7":                true,
		"10.244.2.255":              true,
		"10.244.3.1":                false, // no node's CIDR
		"2600:1f14:abc:de01::5":     true,  // IPv6 global unicast pods
		"2600:1f14:abc:de02:0:1::9": true,
		"2600:1f14:abc:de03::5":     false,
		"192.0.2.11":                true, // InternalIP
		"203.0.113.11":              true, // ExternalIP
		"2001:db8:0:1::12":          true,
		"192.0.2.13":                false, // a neighbour of the nodes, no node
		"198.51.100.1":              false,
	} {
		if got := s.contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("contains(%s) = %v, want %v", a, got, want)
		}
	}
	var none *netSet
	if none.contains(netip.MustParseAddr("10.244.1.7")) {
		t.Error("an unsynced set answers a source")
	}
}

// TestNodesWatch follows the Node objects through a fake API: a node
// added later is answered within the rebuild interval, a deleted one no
// longer, and the stored objects are slimmed.
func TestNodesWatch(t *testing.T) {
	cs := fake.NewClientset(node("a", []string{"10.244.1.0/24"}, "192.0.2.11"))
	n := NewNodes(cs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx, 20*time.Millisecond)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pod2 := netip.MustParseAddr("2600:1f14:abc:de02::5")
	waitFor("the first list", n.Synced)
	if !n.Contains(netip.MustParseAddr("10.244.1.9")) || n.Contains(pod2) {
		t.Fatalf("after the first list: 10.244.1.9 %v, %s %v; want true, false", n.Contains(netip.MustParseAddr("10.244.1.9")), pod2, n.Contains(pod2))
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node("b", []string{"2600:1f14:abc:de02::/80"}, "2001:db8::12"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node b", func() bool { return n.Contains(pod2) })
	if !n.Contains(netip.MustParseAddr("2001:db8::12")) {
		t.Error("node b's InternalIP is not answered")
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node a's removal", func() bool { return !n.Contains(netip.MustParseAddr("10.244.1.9")) })
	if n.Contains(netip.MustParseAddr("192.0.2.11")) {
		t.Error("deleted node a's address is still answered")
	}

	s, _ := slim(node("c", []string{"10.244.3.0/24"}, "192.0.2.13"))
	if sn := s.(*corev1.Node); len(sn.Status.Images) != 0 || len(sn.Spec.PodCIDRs) != 1 || len(sn.Status.Addresses) != 2 {
		t.Errorf("slim kept images %d, pod CIDRs %d, addresses %d; want 0, 1, 2", len(sn.Status.Images), len(sn.Spec.PodCIDRs), len(sn.Status.Addresses))
	}
}

// TestServeDNS: an allowed source reaches the next plugin, another gets
// REFUSED with the question only, and is counted.
func TestServeDNS(t *testing.T) {
	static, err := srcpolicy.Parse([]string{"10.0.0.0/8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := NewNodes(nil)
	n.set.Store(buildSet([]*corev1.Node{node("a", []string{"2600:1f14::/64"}, "198.51.100.20")}))
	next := test.HandlerFunc(func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{test.A("x.example. 5 IN A 192.0.2.1")}
		w.WriteMsg(m)
		return dns.RcodeSuccess, nil
	})
	a := &ACL{Next: next, static: static, nodes: n}
	for _, c := range []struct {
		src  string
		want int
	}{
		{"10.1.2.3", dns.RcodeSuccess},
		{"127.0.0.1", dns.RcodeSuccess},
		{"::1", dns.RcodeSuccess},
		{"2600:1f14::7", dns.RcodeSuccess},
		{"198.51.100.20", dns.RcodeSuccess},
		{"198.51.100.21", dns.RcodeRefused},
		{"2001:db8::1", dns.RcodeRefused},
		{"::ffff:10.1.2.3", dns.RcodeSuccess},
	} {
		q := new(dns.Msg)
		q.SetQuestion("x.example.", dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: c.src})
		if _, err := a.ServeDNS(context.Background(), rec, q); err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if rec.Msg == nil || rec.Msg.Rcode != c.want {
			t.Errorf("%s: %v, want %s", c.src, rec.Msg, dns.RcodeToString[c.want])
			continue
		}
		if c.want == dns.RcodeRefused && (len(rec.Msg.Answer) != 0 || len(rec.Msg.Question) != 1 || rec.Msg.Len() > q.Len()) {
			t.Errorf("%s: REFUSED answer of %d bytes with %d answers for a %d-byte query", c.src, rec.Msg.Len(), len(rec.Msg.Answer), q.Len())
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, err string
		nodes   bool
		words   string
		kc      string
	}{
		{in: "nodedns_acl local nodes 10.1.0.0/16", nodes: true, words: "local 10.1.0.0/16"},
		{in: "nodedns_acl local,nodes", nodes: true, words: "local"},
		{in: "nodedns_acl nodes {\n kubeconfig /k\n}", nodes: true, kc: "/k"},
		{in: "nodedns_acl", err: "no network given"},
		{in: "nodedns_acl nodes {\n bogus\n}", err: "unknown property"},
	} {
		cfg, err := parse(caddy.NewTestController("dns", c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if cfg.nodes != c.nodes || strings.Join(cfg.words, " ") != c.words || cfg.kubeconfig != c.kc {
			t.Errorf("%q: %+v", c.in, cfg)
		}
	}
	// A bad prefix fails the setup, naming it.
	err := setup(caddy.NewTestController("dns", "nodedns_acl 10.0.0.0/33"))
	if err == nil || !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Errorf("bad prefix: %v", err)
	}
	var _ plugin.Handler = (*ACL)(nil)
}

// BenchmarkAllowedNodes is the check of a source of another node's pod,
// against a cluster of 1,000 nodes: a map lookup per prefix length.
func BenchmarkAllowedNodes(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 1000 {
		nodes = append(nodes, node(fmt.Sprint(i), []string{fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256), fmt.Sprintf("2600:1f14:%x::/80", i)}, fmt.Sprintf("192.0.%d.%d", 2+i/256, i%256)))
	}
	n := NewNodes(nil)
	n.set.Store(buildSet(nodes))
	a := &ACL{nodes: n}
	src := netip.MustParseAddr("10.103.231.7")
	if !a.Allowed(src) {
		b.Fatal("not allowed")
	}
	b.ResetTimer()
	for range b.N {
		a.Allowed(src)
	}
}
