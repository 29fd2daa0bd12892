package kubespec

import (
	"reflect"
	"testing"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSlim checks that CoreDNS's conversions give the same records from a
// slimmed object as from the object as decoded, that slim drops what they
// do not read, and that a second pass changes nothing.
func TestSlim(t *testing.T) {
	yes := true
	host, node, zone := "web-0", "node-1", "zone-a"
	heavy := metav1.ObjectMeta{
		Name: "web", Namespace: "ns", UID: "u1", ResourceVersion: "42",
		Labels: map[string]string{"app": "web", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: EndpointSliceController},
		Annotations: map[string]string{
			corev1.EndpointsLastChangeTriggerTime:              "2026-12-03T10:00:00Z",
			"kubectl.kubernetes.io/last-applied-configuration": `{"big":"json"}`,
		},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web", UID: "u0", Controller: &yes}},
	}
	svc := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: *heavy.DeepCopy(), Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.5", ClusterIPs: []string{"10.96.0.5", "fd00::5"},
			ExternalIPs: []string{"192.0.2.1"}, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example"}}}}}
	}
	slice := func() *discoveryv1.EndpointSlice {
		portName, port, proto := "http", int32(8080), corev1.ProtocolTCP
		return &discoveryv1.EndpointSlice{ObjectMeta: *heavy.DeepCopy(), AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes},
				Hostname: &host, NodeName: &node, Zone: &zone,
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "p1"},
			}},
			Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
		}
	}
	ns := func() *corev1.Namespace { return &corev1.Namespace{ObjectMeta: *heavy.DeepCopy()} }

	for _, tc := range []struct {
		name    string
		obj     func() metav1.Object
		convert object.ToFunc
	}{
		{"service", func() metav1.Object { return svc() }, object.ToService},
		{"endpointslice", func() metav1.Object { return slice() }, object.EndpointSliceToEndpoints},
		{"endpointslice, zonal", func() metav1.Object { return slice() }, object.EndpointSliceToEndpointsWithZones},
		{"namespace", func() metav1.Object { return ns() }, object.ToNamespace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := slim(tc.obj())
			if err != nil {
				t.Fatal(err)
			}
			m := s.(metav1.Object)
			if len(m.GetManagedFields()) != 0 || len(m.GetOwnerReferences()) != 0 || m.GetLabels()["app"] != "" ||
				m.GetAnnotations()["kubectl.kubernetes.io/last-applied-configuration"] != "" {
				t.Errorf("slim kept what no conversion reads: %+v", m)
			}
			twice, _ := slim(s)
			if !reflect.DeepEqual(twice, s) {
				t.Errorf("a second slim changed the object:\n%+v\n%+v", twice, s)
			}
			want, err := tc.convert(tc.obj())
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.convert(m)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("records differ:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	pod := &corev1.Pod{ObjectMeta: heavy}
	if got, _ := slim(pod); got != pod {
		t.Error("slim changed a Pod")
	}
}
