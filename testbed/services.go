package testbed

import (
	"context"
	"fmt"
	"net/netip"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// EndpointSlices that CreateServices writes (there is no EndpointSlice
// controller in the testbed to own them).
const ManagedBy = "nodedns-testbed"

// createWorkers bounds the concurrent creates of CreateServices: enough to
// keep one API server busy, few enough not to trip its inflight limits.
const createWorkers = 16

// EnsureNamespace creates namespace ns unless it exists.
func EnsureNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// CreateServices creates the ClusterIP Services svc-<from>..svc-<to-1> in ns,
// each with one port (http 80→8080/TCP) and one IPv4 EndpointSlice
// svc-<i>-1 of endpoints ready endpoints at ServiceEndpointIP(i, j,
// endpoints). The client's QPS limits the rate.
func CreateServices(ctx context.Context, c kubernetes.Interface, ns string, from, to, endpoints int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for i := from; i < to; i++ {
		g.Go(func() error {
			name := fmt.Sprintf("svc-%d", i)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
			}
			if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create Service %s/%s: %w", ns, name, err)
			}
			eps := make([]discoveryv1.Endpoint, endpoints)
			for j := range eps {
				eps[j] = ReadyEndpoint(ServiceEndpointIP(i, j, endpoints))
			}
			slice := EndpointSlice(ns, name, name+"-1", eps)
			if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create EndpointSlice %s/%s: %w", ns, slice.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// ServiceEndpointIP is endpoint j of Service i when every Service has
// endpoints endpoints: addresses count up from 10.128.0.0.
func ServiceEndpointIP(i, j, endpoints int) netip.Addr {
	return EndpointIP(i*endpoints + j)
}

// EndpointIP is the n-th address from 10.128.0.0 (10.128.0.0/9 holds 8M).
func EndpointIP(n int) netip.Addr {
	v := uint32(10<<24|128<<16) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ReadyEndpoint is a ready endpoint at ip.
func ReadyEndpoint(ip netip.Addr) discoveryv1.Endpoint {
	ready := true
	return discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

// EndpointSlice is an IPv4 EndpointSlice name of Service service with the
// port of CreateServices (http 8080/TCP), managed by ManagedBy.
func EndpointSlice(ns, service, name string, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	portName, port, proto := "http", int32(8080), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels:    map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: ManagedBy},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
}
