package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/testbed"
)

// TestEndpointSlicesSpec runs the default Corefile (endpointslices spec)
// and the same with endpointslices all against a real API server, with the
// slices written as their real writers write them: the EndpointSlice
// controller's for a ClusterIP and a headless Service, a controller's of its
// own for a ClusterIP Service, a user's for a headless Service without
// selector (no headless label). The spec watch must answer every record of
// the DNS specification and drop only the endpoint records of the
// EndpointSlice controller's ClusterIP slices; all must answer those too.
func TestEndpointSlicesSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test; -short given")
	}
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := &kube{t: t, ctx: ctx, c: tb.Client(), ns: "spec"}
	k.namespace()

	http := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	slicePorts := []discoveryv1.EndpointPort{port("http", 8080, corev1.ProtocolTCP)}
	selector := map[string]string{"app": "x"}
	controller := map[string]string{discoveryv1.LabelManagedBy: kubespec.EndpointSliceController}
	headless := map[string]string{discoveryv1.LabelManagedBy: kubespec.EndpointSliceController, corev1.IsHeadlessService: ""}

	// web: ClusterIP with a selector, its slice the EndpointSlice controller's.
	web := k.service("web", corev1.ServiceSpec{Selector: selector, Ports: http})
	k.labelledSlice("web", "web-abcde", controller, slicePorts, ep("10.3.0.1", "", true))
	// op: ClusterIP without a selector, its slice another controller's.
	op := k.service("op", corev1.ServiceSpec{Ports: http})
	k.labelledSlice("op", "op-1", map[string]string{discoveryv1.LabelManagedBy: "operator.example.com"}, slicePorts, ep("10.3.1.1", "", true))
	// hl: headless with a selector, the controller's slice with its label.
	k.service("hl", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: selector, Ports: http})
	k.labelledSlice("hl", "hl-abcde", headless, slicePorts, ep("10.3.2.1", "hl-0", true))
	// byhand: headless without a selector, a user's slice without the label.
	k.service("byhand", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: http})
	k.labelledSlice("byhand", "byhand-1", map[string]string{discoveryv1.LabelManagedBy: "user"}, slicePorts, ep("10.3.3.1", "", true))
	// ext: ExternalName, no slices.
	k.service("ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "fwd.example"})
	// empty: ClusterIP with a selector and no ready endpoint.
	empty := k.service("empty", corev1.ServiceSpec{Selector: selector, Ports: http})
	k.labelledSlice("empty", "empty-abcde", controller, slicePorts, ep("10.3.4.1", "", false))

	const zone = ".spec.svc.cluster.local."
	soa := []string{"SOA"}
	forwarded := []string{} // the fake upstream's NXDOMAIN carries no SOA
	rev := func(ip string) string { r, _ := dns.ReverseAddr(ip); return r }
	type query struct {
		name      string
		qtype     uint16
		rcode     int
		answer    []string
		authority []string
	}
	// Answered the same by both modes: what the specification defines.
	common := []query{
		{"web" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + web.Spec.ClusterIP}, nil},
		{"_http._tcp.web" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 100 80 web" + zone}, nil},
		{rev(web.Spec.ClusterIP), dns.TypePTR, dns.RcodeSuccess, []string{"PTR web" + zone}, nil},
		{"op" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + op.Spec.ClusterIP}, nil},
		{"10-3-1-1.op" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.1.1"}, nil},
		{rev("10.3.1.1"), dns.TypePTR, dns.RcodeSuccess, []string{"PTR 10-3-1-1.op" + zone}, nil},
		{"hl" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.2.1"}, nil},
		{"hl-0.hl" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.2.1"}, nil},
		{"_http._tcp.hl" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 100 8080 hl-0.hl" + zone}, nil},
		{rev("10.3.2.1"), dns.TypePTR, dns.RcodeSuccess, []string{"PTR hl-0.hl" + zone}, nil},
		{"byhand" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.3.1"}, nil},
		{"10-3-3-1.byhand" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.3.1"}, nil},
		{rev("10.3.3.1"), dns.TypePTR, dns.RcodeSuccess, []string{"PTR 10-3-3-1.byhand" + zone}, nil},
		{"ext" + zone, dns.TypeA, dns.RcodeSuccess, []string{"CNAME fwd.example.", "A 192.0.2.1"}, nil},
		{"empty" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + empty.Spec.ClusterIP}, nil},
		{"nosuch" + zone, dns.TypeA, dns.RcodeNameError, nil, soa},
	}
	// The records made from the EndpointSlice controller's slices of a
	// ClusterIP Service: outside the specification.
	spec := []query{
		{"10-3-0-1.web" + zone, dns.TypeA, dns.RcodeNameError, nil, soa},
		{rev("10.3.0.1"), dns.TypePTR, dns.RcodeNameError, nil, forwarded}, // falls through to forward
	}
	all := []query{
		{"10-3-0-1.web" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.0.1"}, nil},
		{rev("10.3.0.1"), dns.TypePTR, dns.RcodeSuccess, []string{"PTR 10-3-0-1.web" + zone}, nil},
	}
	run := func(t *testing.T, b *backend, qs []query) {
		for _, q := range qs {
			for _, network := range []string{"udp", "tcp"} {
				r := dnstest.Exchange(t, network, b.DNS, dnstest.Query(q.name, q.qtype))
				if err := expect(r, q.rcode, q.answer, q.authority); err != nil {
					t.Errorf("%s %s (%s): %v", q.name, dns.TypeToString[q.qtype], network, err)
				}
			}
		}
	}

	t.Run("spec", func(t *testing.T) {
		b := startClusterBackend(t, tb)
		run(t, b, append(common, spec...))
		// A slice moved into the watched set (a controller handing it
		// over to a user) appears; moved out, it disappears.
		k.relabel("web-abcde", map[string]string{discoveryv1.LabelManagedBy: "user"})
		eventually(t, 10*time.Second, b.DNS, "10-3-0-1.web"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.3.0.1"})
		k.relabel("web-abcde", controller)
		eventually(t, 10*time.Second, b.DNS, "10-3-0-1.web"+zone, dns.TypeA, dns.RcodeNameError, nil)
	})

	t.Run("all", func(t *testing.T) {
		b := startClusterBackend(t, tb, "NODEDNS_ENDPOINTSLICES=all")
		run(t, b, append(common, all...))
	})

	// ignore empty_service needs every Service's endpoints: refused at
	// start-up with the spec watch, honoured with all.
	t.Run("ignore-empty-service", func(t *testing.T) {
		core := strings.Replace(clusterCorefile(t, tb.Kubeconfig), "        pods insecure\n", "        ignore empty_service\n        pods insecure\n", 1)
		_, env := backendPorts(t)
		conf := filepath.Join(t.TempDir(), "Corefile")
		if err := os.WriteFile(conf, []byte(core), 0o644); err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		cmd := backendCommand(cctx, "-conf", conf)
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err == nil || cctx.Err() != nil {
			t.Fatalf("backend with ignore empty_service and endpointslices spec: err %v (context %v), want an exit at start-up; output:\n%s", err, cctx.Err(), out)
		}
		const want = `"ignore empty_service" needs the endpoints of every Service`
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
		t.Logf("refused: %s", strings.TrimSpace(string(out)))

		var fwd atomic.Int64
		up := fakeUpstream(t, &fwd)
		b2, env2 := backendPorts(t)
		env2 = append(env2, "NODEDNS_UPSTREAM="+up.Addr, "NODEDNS_ENDPOINTSLICES=all")
		b2.start(t, core, env2, 60*time.Second)
		run(t, b2, []query{
			{"empty" + zone, dns.TypeA, dns.RcodeNameError, nil, soa},
			{"web" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + web.Spec.ClusterIP}, nil},
		})
	})
}

// labelledSlice creates an IPv4 EndpointSlice of service with labels added
// to the service-name label.
func (k *kube) labelledSlice(service, name string, labels map[string]string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
	k.t.Helper()
	l := map[string]string{discoveryv1.LabelServiceName: service}
	for key, v := range labels {
		l[key] = v
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       ports,
	}
	if _, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Create(k.ctx, s, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("create endpointslice %s/%s: %v", k.ns, name, err)
	}
}

// relabel replaces the labels of slice name, keeping its service-name label.
func (k *kube) relabel(name string, labels map[string]string) {
	k.t.Helper()
	s, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Get(k.ctx, name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatalf("get endpointslice %s/%s: %v", k.ns, name, err)
	}
	l := map[string]string{discoveryv1.LabelServiceName: s.Labels[discoveryv1.LabelServiceName]}
	for key, v := range labels {
		l[key] = v
	}
	s.Labels = l
	if _, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Update(k.ctx, s, metav1.UpdateOptions{}); err != nil {
		k.t.Fatalf("relabel endpointslice %s/%s: %v", k.ns, name, err)
	}
}
