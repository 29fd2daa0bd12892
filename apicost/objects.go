package apicost

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/testbed"
)

// The study's objects look like a real cluster's: Services with selectors
// whose EndpointSlices are labelled and filled as kube-controller-manager's
// EndpointSlice controller writes them (labels, owner reference, trigger
// annotation; per endpoint a Pod targetRef with uid, nodeName, zone and the
// three conditions: about 175 bytes per endpoint in protobuf), so that
// label selectors see what they would see and watch events weigh what they
// would weigh.

// sliceWriter says who wrote a slice, which decides its labels.
type sliceWriter int

const (
	// byController: the EndpointSlice controller, for a Service with a
	// selector and a ClusterIP.
	byController sliceWriter = iota
	// byControllerHeadless: the same controller, for a headless Service:
	// it adds service.kubernetes.io/headless.
	byControllerHeadless
	// byOperator: a slice written by another controller or a user for a
	// Service without selector, without the headless label.
	byOperator
)

// operatorManagedBy is the managed-by value of the byOperator slices.
const operatorManagedBy = "operator.example.com"

// zones are spread over the endpoints as a three-zone cluster would.
var zones = []string{"zone-a", "zone-b", "zone-c"}

// studyService is a Service with one port; a selector unless w is
// byOperator; headless for byControllerHeadless.
func studyService(name string, w sliceWriter) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": name}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if w != byOperator {
		svc.Spec.Selector = map[string]string{"app": name}
	}
	if w == byControllerHeadless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return svc
}

// studySlice is slice name of svc (as created: with its UID) written by w.
func studySlice(svc *corev1.Service, name string, w sliceWriter, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	portName, port, proto := "http", int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: svc.Namespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	if w == byOperator {
		s.Labels[discoveryv1.LabelManagedBy] = operatorManagedBy
		return s
	}
	// The controller copies the Service's labels and adds its own.
	for k, v := range svc.Labels {
		s.Labels[k] = v
	}
	s.Labels[discoveryv1.LabelManagedBy] = kubespec.EndpointSliceController
	if w == byControllerHeadless {
		s.Labels[corev1.IsHeadlessService] = ""
	}
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339)}
	yes := true
	s.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: &yes, BlockOwnerDeletion: &yes,
	}}
	return s
}

// studyEndpoint is endpoint number n (a global counter: every Pod gets its
// own name and uid) of Service service at ip, on one of nodes Nodes.
func studyEndpoint(service string, n, nodes int, ip netip.Addr) discoveryv1.Endpoint {
	yes, no := true, false
	node := nodeName(n % max(nodes, 1))
	zone := zones[n%len(zones)]
	return discoveryv1.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
		TargetRef: &corev1.ObjectReference{
			Kind:      "Pod",
			Namespace: Namespace,
			Name:      fmt.Sprintf("%s-6f7d8c9b5d-%05x", service, n&0xfffff),
			UID:       types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", n, n>>8&0xffff, n&0xfff, n>>4&0xfff, n*7919)),
		},
		NodeName: &node,
		Zone:     &zone,
	}
}

// operatorEndpoint is what a hand-written slice holds: an address and
// readiness.
func operatorEndpoint(ip netip.Addr) discoveryv1.Endpoint {
	yes := true
	return discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}
}

// createServices creates Services svc-0 .. svc-<n-1> with selectors, each
// with one EndpointSlice of endpoints endpoints as the EndpointSlice
// controller writes it.
func createServices(ctx context.Context, c kubernetes.Interface, n, endpoints, nodes int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			name := fmt.Sprintf("svc-%d", i)
			svc, err := c.CoreV1().Services(Namespace).Create(ctx, studyService(name, byController), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Service %s: %w", name, err)
			}
			eps := make([]discoveryv1.Endpoint, endpoints)
			for j := range eps {
				k := i*endpoints + j
				eps[j] = studyEndpoint(name, k, nodes, testbed.EndpointIP(k))
			}
			slice := studySlice(svc, name+"-"+suffix(i), byController, eps)
			if _, err := c.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create EndpointSlice %s: %w", slice.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// suffix is a five-character name suffix as generateName makes.
func suffix(i int) string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for k := range b {
		b[k] = letters[i%len(letters)]
		i /= len(letters)
	}
	return string(b)
}
