package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/testbed"
)

// serviceCIDRs makes the testbed's Services dual-stack: the testbed's own
// IPv4 range plus an IPv6 one.
const serviceCIDRs = testbed.ServiceCIDR + ",fd00:10:96::/112"

// clusterCorefile is the default Corefile with the kubernetes plugin pointed
// at kubeconfig instead of the in-cluster service account.
func clusterCorefile(t testing.TB, kubeconfig string) string {
	t.Helper()
	core := string(defaultCorefile)
	const anchor = "        pods insecure\n"
	if !strings.Contains(core, anchor) {
		t.Fatal("default Corefile has no 'pods insecure' line")
	}
	return strings.Replace(core, anchor, "        kubeconfig "+kubeconfig+"\n"+anchor, 1)
}

// startClusterBackend runs the backend with the default Corefile against tb,
// forwarding to a fake upstream, with extraEnv added to its environment, and
// waits until it is ready (the kubernetes plugin has synced).
func startClusterBackend(t testing.TB, tb *testbed.Testbed, extraEnv ...string) *backend {
	t.Helper()
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr)
	env = append(env, extraEnv...)
	b.start(t, clusterCorefile(t, tb.Kubeconfig), env, 60*time.Second)
	return b
}

func TestKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("testbed test; -short given")
	}
	tb := testbed.StartForTest(t, testbed.Options{
		ExtraAPIServerArgs: []string{"--service-cluster-ip-range=" + serviceCIDRs},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := &kube{t: t, ctx: ctx, c: tb.Client(), ns: "e2e"}
	k.namespace()

	// web: ClusterIP, dual-stack, two named ports, endpoints in three slices
	// (two IPv4, one IPv6), one not ready.
	web := k.service("web", corev1.ServiceSpec{
		IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
		IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		},
	})
	webPorts := []discoveryv1.EndpointPort{port("http", 8080, corev1.ProtocolTCP), port("dns", 5353, corev1.ProtocolUDP)}
	k.slice("web", "web-a", discoveryv1.AddressTypeIPv4, webPorts, ep("10.1.0.1", "", true), ep("10.1.0.2", "", false))
	k.slice("web", "web-b", discoveryv1.AddressTypeIPv4, webPorts, ep("10.1.0.3", "", true))
	k.slice("web", "web-c", discoveryv1.AddressTypeIPv6, webPorts, ep("fd00:1::1", "", true))

	// db: headless, endpoints with hostnames in two slices, one not ready.
	k.service("db", corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone,
		Ports:     []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}},
	})
	dbPorts := []discoveryv1.EndpointPort{port("pg", 5432, corev1.ProtocolTCP)}
	k.slice("db", "db-a", discoveryv1.AddressTypeIPv4, dbPorts, ep("10.2.0.1", "db-0", true), ep("10.2.0.3", "db-2", false))
	k.slice("db", "db-b", discoveryv1.AddressTypeIPv4, dbPorts, ep("10.2.0.2", "db-1", true))

	// ext: ExternalName to a name the fake upstream answers.
	k.service("ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "fwd.example"})

	b := startClusterBackend(t, tb)
	webV4, webV6 := web.Spec.ClusterIPs[0], web.Spec.ClusterIPs[1]
	revV4, _ := dns.ReverseAddr(webV4)
	revV6, _ := dns.ReverseAddr(webV6)

	const zone = ".e2e.svc.cluster.local."
	soa := []string{"SOA"} // authority section of a negative answer
	tests := []struct {
		name      string
		qtype     uint16
		rcode     int
		answer    []string // RR strings without name and TTL: "A 10.1.0.1"
		authority []string // types only
	}{
		{"web" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + webV4}, nil},
		{"web" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"AAAA " + webV6}, nil},
		// A dual-stack Service is two records to the kubernetes plugin (one
		// per ClusterIP), each weighted 50; the SRV records they make are
		// identical and the duplicate is dropped.
		{"_http._tcp.web" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 50 80 web" + zone}, nil},
		{"_dns._udp.web" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 50 53 web" + zone}, nil},
		{"_http._udp.web" + zone, dns.TypeSRV, dns.RcodeNameError, nil, soa}, // right name, wrong protocol
		{revV4, dns.TypePTR, dns.RcodeSuccess, []string{"PTR web" + zone}, nil},
		{revV6, dns.TypePTR, dns.RcodeSuccess, []string{"PTR web" + zone}, nil},
		{"db" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.2.0.1", "A 10.2.0.2"}, nil}, // not-ready db-2 left out
		{"db-0.db" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.2.0.1"}, nil},
		{"db-2.db" + zone, dns.TypeA, dns.RcodeNameError, nil, soa},
		{"db" + zone, dns.TypeAAAA, dns.RcodeSuccess, nil, soa}, // NODATA: the name exists
		{"_pg._tcp.db" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 50 5432 db-0.db" + zone, "SRV 0 50 5432 db-1.db" + zone}, nil},
		{"1.0.2.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR db-0.db" + zone}, nil},
		{"ext" + zone, dns.TypeA, dns.RcodeSuccess, []string{"CNAME fwd.example.", "A 192.0.2.1"}, nil},
		{"web" + zone, dns.TypeMX, dns.RcodeSuccess, nil, soa},  // NODATA
		{"web" + zone, dns.TypeTXT, dns.RcodeSuccess, nil, soa}, // NODATA
		{"nosuch" + zone, dns.TypeA, dns.RcodeNameError, nil, soa},
		{"e2e.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil, soa}, // the namespace exists: NODATA
		{"nosuchns.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		// Search-path expansions of an external name must fail fast so
		// the resolver moves on to the next search domain.
		{"google.com.e2e.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"google.com.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"google.com.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"google.com.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		// The names above those tries: NXDOMAIN, so that nothing under
		// them exists (RFC 8020), which the frontend's search-path
		// prefetch relies on; NODATA for those with names under them.
		{"com.e2e.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"com.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"com.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		{"svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil, soa},
		{"cluster.local.", dns.TypeA, dns.RcodeSuccess, nil, soa},
		{"db.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil, soa},
		// Outside the cluster: the fake upstream through forward.
		{"fwd.example.", dns.TypeA, dns.RcodeSuccess, []string{"A 192.0.2.1"}, nil},
		{"1.2.0.192.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, nil, nil}, // fallthrough to forward
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			t.Run(network+"/"+dns.TypeToString[tc.qtype]+"/"+tc.name, func(t *testing.T) {
				r := dnstest.Exchange(t, network, b.DNS, dnstest.Query(tc.name, tc.qtype))
				if err := expect(r, tc.rcode, tc.answer, tc.authority); err != nil {
					t.Error(err)
				}
			})
		}
	}

	// The whole path: a pod's query to the frontend, a miss to the backend
	// over the frontend's TCP pool, and the second time the frontend's cache.
	t.Run("through-frontend", func(t *testing.T) {
		fe := startFrontend(t, b)
		for _, tc := range []struct {
			name   string
			qtype  uint16
			rcode  int
			answer []string
		}{
			{"web" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + webV4}},
			{"db" + zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.2.0.1", "A 10.2.0.2"}},
			{"_http._tcp.web" + zone, dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 0 50 80 web" + zone}},
			{"google.com.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
			{"fwd.example.", dns.TypeA, dns.RcodeSuccess, []string{"A 192.0.2.1"}},
		} {
			for i := range 2 { // miss, then hit
				for _, network := range []string{"udp", "tcp"} {
					r := dnstest.Exchange(t, network, fe, dnstest.Query(tc.name, tc.qtype))
					if err := expect(r, tc.rcode, tc.answer, nil); err != nil {
						t.Errorf("%s %s via frontend (%s, query %d): %v", tc.name, dns.TypeToString[tc.qtype], network, i+1, err)
					}
				}
			}
		}
	})

	// The frontend answers names under a cached NXDOMAIN NXDOMAIN itself
	// at the Service, namespace and domain levels (--deny-below-nxdomain,
	// RFC 8020): the plugin must agree with every such answer, and a name
	// under a Service's NXDOMAIN child must still reach it.
	t.Run("denied-below-nxdomain", func(t *testing.T) {
		fe := startFrontend(t, b)
		for _, tc := range []struct {
			cut, name string
			qtype     uint16
		}{
			{"nosuch" + zone, "x.nosuch" + zone, dns.TypeA},
			{"nosuch" + zone, "_http._tcp.nosuch" + zone, dns.TypeSRV},
			{"nosuchns.svc.cluster.local.", "web.nosuchns.svc.cluster.local.", dns.TypeA},
			{"com.cluster.local.", "google.com.cluster.local.", dns.TypeAAAA},
			{"_tcp.web" + zone, "_http._tcp.web" + zone, dns.TypeSRV}, // below a Service: not denied
		} {
			if r := dnstest.Exchange(t, "udp", fe, dnstest.Query(tc.cut, tc.qtype)); r.Rcode != dns.RcodeNameError {
				t.Fatalf("%s %s via frontend: rcode %s, want NXDOMAIN", tc.cut, dns.TypeToString[tc.qtype], dns.RcodeToString[r.Rcode])
			}
			want := dnstest.Exchange(t, "udp", b.DNS, dnstest.Query(tc.name, tc.qtype))
			got := dnstest.Exchange(t, "udp", fe, dnstest.Query(tc.name, tc.qtype))
			if got.Rcode != want.Rcode || !slices.Equal(rdata(got.Answer), rdata(want.Answer)) {
				t.Errorf("%s %s: frontend answers %s %q, the backend %s %q", tc.name, dns.TypeToString[tc.qtype],
					dns.RcodeToString[got.Rcode], rdata(got.Answer), dns.RcodeToString[want.Rcode], rdata(want.Answer))
			}
		}
	})

	// Changes reach the answers quickly: the kubernetes plugin is fed by
	// watches and the backend's cache leaves cluster.local alone.
	t.Run("changes", func(t *testing.T) {
		k.slice("db", "db-c", discoveryv1.AddressTypeIPv4, dbPorts, ep("10.2.0.4", "db-3", true))
		eventually(t, 10*time.Second, b.DNS, "db"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A 10.2.0.1", "A 10.2.0.2", "A 10.2.0.4"})
		late := k.service("late", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}})
		eventually(t, 10*time.Second, b.DNS, "late"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + late.Spec.ClusterIP})
		k.delete("web")
		eventually(t, 10*time.Second, b.DNS, "web"+zone, dns.TypeA, dns.RcodeNameError, nil)
	})

	// The API server goes away and comes back: the backend answers from
	// what it knows throughout, then catches up with changes made after.
	t.Run("apiserver-restart", func(t *testing.T) {
		var stop atomic.Bool
		var wg sync.WaitGroup
		// wrong counts answers that differ from the state before the
		// restart: the backend must never lose or change what it knows.
		// timeouts counts exchanges that got no answer in 5s; on two
		// shared cores under load the test's own client can be starved
		// that long, so a few are tolerated and reported.
		var queries, wrong, timeouts atomic.Int64
		var firstWrong, firstTimeout atomic.Value
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
				r, _, err := c.Exchange(dnstest.Query("db"+zone, dns.TypeA), b.DNS)
				queries.Add(1)
				switch {
				case err != nil:
					timeouts.Add(1)
					firstTimeout.CompareAndSwap(nil, err)
				default:
					if err := expect(r, dns.RcodeSuccess, []string{"A 10.2.0.1", "A 10.2.0.2", "A 10.2.0.4"}, nil); err != nil {
						wrong.Add(1)
						firstWrong.CompareAndSwap(nil, err)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		start := time.Now()
		if err := tb.RestartAPIServer(ctx); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("restart API server: %v", err)
		}
		took := time.Since(start)
		stop.Store(true)
		wg.Wait()
		t.Logf("API server restart took %v; %d queries during it, %d wrong answers, %d without answer (first: %v)",
			took.Round(time.Millisecond), queries.Load(), wrong.Load(), timeouts.Load(), firstTimeout.Load())
		if wrong.Load() > 0 {
			t.Errorf("%d of %d answers during the restart differ from before it; first: %v", wrong.Load(), queries.Load(), firstWrong.Load())
		}
		if timeouts.Load()*100 > queries.Load() {
			t.Errorf("%d of %d queries got no answer during the restart (more than 1%%); first: %v", timeouts.Load(), queries.Load(), firstTimeout.Load())
		}
		after := k.service("after", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}})
		k.delete("late")
		eventually(t, 30*time.Second, b.DNS, "after"+zone, dns.TypeA, dns.RcodeSuccess, []string{"A " + after.Spec.ClusterIP})
		eventually(t, 30*time.Second, b.DNS, "late"+zone, dns.TypeA, dns.RcodeNameError, nil)
	})
}

// expect compares r with the wanted rcode, answer records (type and rdata,
// in any order) and authority record types.
func expect(r *dns.Msg, rcode int, answer, authority []string) error {
	var errs []error
	if r.Rcode != rcode {
		errs = append(errs, fmt.Errorf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[rcode]))
	}
	if got := rdata(r.Answer); !slices.Equal(got, sorted(answer)) {
		errs = append(errs, fmt.Errorf("answer %q, want %q", got, sorted(answer)))
	}
	if authority != nil {
		var got []string
		for _, rr := range r.Ns {
			got = append(got, dns.TypeToString[rr.Header().Rrtype])
		}
		if !slices.Equal(got, authority) {
			errs = append(errs, fmt.Errorf("authority %q, want %q", got, authority))
		}
	}
	return errors.Join(errs...)
}

// rdata renders records as "TYPE rdata", sorted.
func rdata(rrs []dns.RR) []string {
	var s []string
	for _, rr := range rrs {
		h := rr.Header()
		full := rr.String()
		// The rdata follows the header's text: name, TTL, class, type.
		s = append(s, dns.TypeToString[h.Rrtype]+" "+strings.TrimPrefix(full, h.String()))
	}
	slices.Sort(s)
	return s
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// eventually repeats a query until it gets the wanted answer or timeout passes.
func eventually(t testing.TB, timeout time.Duration, addr, name string, qtype uint16, rcode int, answer []string) {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
		var r *dns.Msg
		r, _, err = c.Exchange(dnstest.Query(name, qtype), addr)
		if err == nil {
			err = expect(r, rcode, answer, nil)
		}
		if err == nil {
			t.Logf("%s %s as wanted after %v", name, dns.TypeToString[qtype], time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s %s after %v: %v", name, dns.TypeToString[qtype], timeout, err)
}

// kube creates objects in one namespace and fails the test on errors.
type kube struct {
	t   testing.TB
	ctx context.Context
	c   kubernetes.Interface
	ns  string
}

func (k *kube) namespace() {
	k.t.Helper()
	_, err := k.c.CoreV1().Namespaces().Create(k.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("create namespace %s: %v", k.ns, err)
	}
}

func (k *kube) service(name string, spec corev1.ServiceSpec) *corev1.Service {
	k.t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns}, Spec: spec}
	svc, err := k.c.CoreV1().Services(k.ns).Create(k.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("create service %s/%s: %v", k.ns, name, err)
	}
	return svc
}

func (k *kube) delete(service string) {
	k.t.Helper()
	if err := k.c.CoreV1().Services(k.ns).Delete(k.ctx, service, metav1.DeleteOptions{}); err != nil {
		k.t.Fatalf("delete service %s/%s: %v", k.ns, service, err)
	}
}

func (k *kube) slice(service, name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
	k.t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: k.ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   "nodedns-test",
			},
		},
		AddressType: family,
		Endpoints:   eps,
		Ports:       ports,
	}
	if _, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Create(k.ctx, s, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("create endpointslice %s/%s: %v", k.ns, name, err)
	}
}

func ep(ip, hostname string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)},
	}
	if hostname != "" {
		e.Hostname = ptr(hostname)
	}
	return e
}

func port(name string, p int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(p), Protocol: ptr(proto)}
}

func ptr[T any](v T) *T { return &v }
