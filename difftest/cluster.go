package difftest

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The namespaces of the cluster state.
const (
	nsA     = "dt-a"     // most Services; the pods' usual namespace
	nsB     = "dt-b"     // a second one, with names shared with nsA
	nsEmpty = "dt-empty" // a namespace without Services
	nsCom   = "com"      // named like a TLD: x.com walks meet it
)

// managedBy marks the suite's EndpointSlices (no EndpointSlice controller
// runs; the backend's "endpointslices spec" watches slices it does not
// know the writer of).
const managedBy = "nodedns-difftest"

// cluster is the cluster state of the suite, written through c.
type cluster struct {
	c    kubernetes.Interface
	hist func(time.Time) // called after each change, with its time

	mu      sync.Mutex
	reverse []string // reverse names of the state's addresses
	dbReady bool     // db-2's readiness
}

func ptr[T any](v T) *T { return &v }

func endpoint(ip, hostname string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)}}
	if hostname != "" {
		e.Hostname = ptr(hostname)
	}
	return e
}

func epPort(name string, p int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(p), Protocol: ptr(proto)}
}

func slice(ns, service, name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: managedBy,
		}},
		AddressType: family, Endpoints: eps, Ports: ports,
	}
}

var httpPort = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
var httpEP = []discoveryv1.EndpointPort{epPort("http", 8080, corev1.ProtocolTCP)}

func (cl *cluster) namespace(ctx context.Context, ns string) error {
	_, err := cl.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

func (cl *cluster) service(ctx context.Context, ns, name string, spec corev1.ServiceSpec) (*corev1.Service, error) {
	svc, err := cl.c.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Service %s/%s: %w", ns, name, err)
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != corev1.ClusterIPNone {
			cl.addReverse(ip)
		}
	}
	return svc, nil
}

func (cl *cluster) slice(ctx context.Context, s *discoveryv1.EndpointSlice) error {
	if _, err := cl.c.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	for _, e := range s.Endpoints {
		cl.addReverse(e.Addresses...)
	}
	return nil
}

func (cl *cluster) addReverse(ips ...string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, ip := range ips {
		if n := reverseName(ip); n != "" {
			cl.reverse = append(cl.reverse, n)
		}
	}
}

// reverseNames are the PTR names of every address the state had, and
// some outside it (forwarded upstream, or in the service range unused).
func (cl *cluster) reverseNames() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := append([]string(nil), cl.reverse...)
	for _, ip := range []string{"10.96.200.200", "10.1.0.99", "203.0.113.7", "192.0.2.1", "fd00:10:96::ffff", "2001:db8::1"} {
		out = append(out, reverseName(ip))
	}
	return out
}

// populate writes the initial state: what the Kubernetes DNS specification
// covers (ClusterIP Services with named ports, headless Services with and
// without hostnames, not-ready endpoints, ExternalName, dual-stack, pod
// names) and more (a namespace without Services, one named like a TLD, a
// Service named like one, an IPv6-only Service, Services without
// endpoints).
func (cl *cluster) populate(ctx context.Context) error {
	for _, ns := range []string{nsA, nsB, nsEmpty, nsCom} {
		if err := cl.namespace(ctx, ns); err != nil {
			return err
		}
	}
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	webPorts := []corev1.ServicePort{
		{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
	}
	webEP := []discoveryv1.EndpointPort{epPort("http", 8080, corev1.ProtocolTCP), epPort("dns", 5353, corev1.ProtocolUDP)}
	dbPort := []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}
	dbEP := []discoveryv1.EndpointPort{epPort("pg", 5432, corev1.ProtocolTCP)}
	headless := func(ports []corev1.ServicePort) corev1.ServiceSpec {
		return corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: ports}
	}
	steps := []func() error{
		func() error {
			_, err := cl.service(ctx, nsA, "web", corev1.ServiceSpec{
				IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
				IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				Ports:          webPorts,
			})
			return err
		},
		func() error {
			return cl.slice(ctx, slice(nsA, "web", "web-a", v4, webEP, endpoint("10.1.0.1", "", true), endpoint("10.1.0.2", "", false)))
		},
		func() error {
			return cl.slice(ctx, slice(nsA, "web", "web-b", v4, webEP, endpoint("10.1.0.3", "", true)))
		},
		func() error {
			return cl.slice(ctx, slice(nsA, "web", "web-c", v6, webEP, endpoint("fd00:1::1", "", true)))
		},
		// db: a StatefulSet's headless Service, pods db-0..db-2, db-2 not ready.
		func() error { _, err := cl.service(ctx, nsA, "db", headless(dbPort)); return err },
		func() error {
			return cl.slice(ctx, slice(nsA, "db", "db-a", v4, dbEP, endpoint("10.2.0.1", "db-0", true), endpoint("10.2.0.3", "db-2", false)))
		},
		func() error {
			return cl.slice(ctx, slice(nsA, "db", "db-b", v4, dbEP, endpoint("10.2.0.2", "db-1", true)))
		},
		// anon: headless, endpoints without hostnames, one not ready.
		func() error { _, err := cl.service(ctx, nsA, "anon", headless(httpPort)); return err },
		func() error {
			return cl.slice(ctx, slice(nsA, "anon", "anon-a", v4, httpEP, endpoint("10.2.0.5", "", true), endpoint("10.2.0.6", "", false)))
		},
		func() error {
			return cl.slice(ctx, slice(nsA, "anon", "anon-b", v6, httpEP, endpoint("fd00:2::5", "", true)))
		},
		func() error {
			_, err := cl.service(ctx, nsA, "ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "www.example.com"})
			return err
		},
		func() error {
			_, err := cl.service(ctx, nsA, "alias", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web." + nsB + ".svc.cluster.local"})
			return err
		},
		func() error {
			_, err := cl.service(ctx, nsA, "v6", corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, Ports: httpPort})
			return err
		},
		func() error {
			_, err := cl.service(ctx, nsA, "lonely", corev1.ServiceSpec{Ports: httpPort})
			return err
		},
		func() error { _, err := cl.service(ctx, nsA, "empty-headless", headless(httpPort)); return err },
		func() error { _, err := cl.service(ctx, nsA, "com", corev1.ServiceSpec{Ports: httpPort}); return err },
		func() error { _, err := cl.service(ctx, nsB, "web", corev1.ServiceSpec{Ports: httpPort}); return err },
		func() error {
			return cl.slice(ctx, slice(nsB, "web", "web-a", v4, httpEP, endpoint("10.3.0.1", "", true)))
		},
		func() error { _, err := cl.service(ctx, nsB, "db", headless(dbPort)); return err },
		func() error {
			return cl.slice(ctx, slice(nsB, "db", "db-a", v4, dbEP, endpoint("10.3.0.11", "db-0", true), endpoint("10.3.0.12", "db-1", true)))
		},
		func() error { _, err := cl.service(ctx, nsCom, "www", corev1.ServiceSpec{Ports: httpPort}); return err },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// deleteAfter is how many rounds a created Service lives: long enough
// for its convergence to be measured (rounds are seconds apart).
const deleteAfter = 4

// created is a Service a round created, and when.
type created struct {
	fqdn string
	ip   string
	at   time.Time
}

// round changes the cluster: it creates the Services new-R-0..new-R-(n-1)
// in nsA (each with a ready endpoint) and returns them, deletes those of
// round r-deleteAfter, creates namespace dt-rR with a Service web and deletes that
// of round r-2, flips db-2's readiness, and creates a headless Service
// hl-R with a pod hostname and deletes that of round r-1.
func (cl *cluster) round(ctx context.Context, r, n int, domain string) ([]created, error) {
	var out []created
	// Each change is marked before its API call (and after the one
	// before): the backend may answer by a change before the call returns.
	mark := func() { cl.hist(time.Now()) }
	mark()
	defer mark()
	for k := range n {
		name := fmt.Sprintf("new-%d-%d", r, k)
		svc, err := cl.service(ctx, nsA, name, corev1.ServiceSpec{Ports: httpPort})
		if err != nil {
			return nil, err
		}
		out = append(out, created{fqdn: name + "." + nsA + ".svc." + domain + ".", ip: svc.Spec.ClusterIP, at: time.Now()})
		mark()
		if err := cl.slice(ctx, slice(nsA, name, name+"-a", discoveryv1.AddressTypeIPv4, httpEP, endpoint(fmt.Sprintf("10.4.%d.%d", r%250, k+1), "", true))); err != nil {
			return nil, err
		}
		mark()
	}
	del := func(ns, kind, name string, f func() error) error {
		err := f()
		mark()
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", kind, ns, name, err)
		}
		return nil
	}
	if r >= deleteAfter {
		for k := range n {
			name := fmt.Sprintf("new-%d-%d", r-deleteAfter, k)
			if err := del(nsA, "Service", name, func() error { return cl.c.CoreV1().Services(nsA).Delete(ctx, name, metav1.DeleteOptions{}) }); err != nil {
				return nil, err
			}
			if err := del(nsA, "EndpointSlice", name+"-a", func() error {
				return cl.c.DiscoveryV1().EndpointSlices(nsA).Delete(ctx, name+"-a", metav1.DeleteOptions{})
			}); err != nil {
				return nil, err
			}
		}
	}
	ns := fmt.Sprintf("dt-r%d", r)
	if err := cl.namespace(ctx, ns); err != nil {
		return nil, err
	}
	if _, err := cl.service(ctx, ns, "web", corev1.ServiceSpec{Ports: httpPort}); err != nil {
		return nil, err
	}
	mark()
	if r >= 2 {
		old := fmt.Sprintf("dt-r%d", r-2)
		if err := cl.deleteNamespace(ctx, old); err != nil {
			return nil, err
		}
		mark()
	}
	// db-2 ready or not, in turn.
	cl.mu.Lock()
	cl.dbReady = !cl.dbReady
	ready := cl.dbReady
	cl.mu.Unlock()
	s, err := cl.c.DiscoveryV1().EndpointSlices(nsA).Get(ctx, "db-a", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get EndpointSlice db-a: %w", err)
	}
	for i := range s.Endpoints {
		if h := s.Endpoints[i].Hostname; h != nil && *h == "db-2" {
			s.Endpoints[i].Conditions.Ready = ptr(ready)
		}
	}
	if _, err := cl.c.DiscoveryV1().EndpointSlices(nsA).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("update EndpointSlice db-a: %w", err)
	}
	mark()
	hl := fmt.Sprintf("hl-%d", r)
	if _, err := cl.service(ctx, nsA, hl, corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: httpPort}); err != nil {
		return nil, err
	}
	if err := cl.slice(ctx, slice(nsA, hl, hl+"-a", discoveryv1.AddressTypeIPv4, httpEP, endpoint(fmt.Sprintf("10.5.%d.1", r%250), hl+"-0", true))); err != nil {
		return nil, err
	}
	mark()
	if r > 0 {
		old := fmt.Sprintf("hl-%d", r-1)
		if err := del(nsA, "Service", old, func() error { return cl.c.CoreV1().Services(nsA).Delete(ctx, old, metav1.DeleteOptions{}) }); err != nil {
			return nil, err
		}
		if err := del(nsA, "EndpointSlice", old+"-a", func() error {
			return cl.c.DiscoveryV1().EndpointSlices(nsA).Delete(ctx, old+"-a", metav1.DeleteOptions{})
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deleteNamespace deletes ns's Services and ns itself, and finalizes it:
// no namespace controller runs in the testbed to do either.
func (cl *cluster) deleteNamespace(ctx context.Context, ns string) error {
	svcs, err := cl.c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Services of %s: %w", ns, err)
	}
	for _, s := range svcs.Items {
		if err := cl.c.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Service %s/%s: %w", ns, s.Name, err)
		}
	}
	if err := cl.c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	n, err := cl.c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get namespace %s: %w", ns, err)
	}
	n.Spec.Finalizers = nil
	if _, err := cl.c.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finalize namespace %s: %w", ns, err)
	}
	return nil
}
