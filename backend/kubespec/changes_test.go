package kubespec

import (
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
)

// TestSerial checks that updates move the SOA serial (Modified) only when
// they change what DNS shows.
func TestSerial(t *testing.T) {
	svc := func(rv, extName string, ext []string, port int32) *object.Service {
		return &object.Service{Version: rv, ExternalName: extName, ExternalIPs: ext,
			Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}}
	}
	eps := func(rv, ip, host string) *object.Endpoints {
		return &object.Endpoints{Version: rv, Subsets: []object.EndpointSubset{{
			Addresses: []object.EndpointAddress{{IP: ip, Hostname: host}},
			Ports:     []object.EndpointPort{{Port: 80, Name: "http", Protocol: "TCP"}},
		}}}
	}
	for _, tc := range []struct {
		name               string
		old, new           any
		internal, external bool
	}{
		{"same resource version", svc("1", "", nil, 80), svc("1", "x", nil, 81), false, false},
		{"service: nothing DNS shows", svc("1", "", nil, 80), svc("2", "", nil, 80), false, false},
		{"service: port", svc("1", "", nil, 80), svc("2", "", nil, 81), true, true},
		{"service: external name", svc("1", "a.example", nil, 80), svc("2", "b.example", nil, 80), true, false},
		{"service: external IP", svc("1", "", nil, 80), svc("2", "", []string{"192.0.2.1"}, 80), false, true},
		{"endpoints: readiness elsewhere", eps("1", "10.0.0.1", ""), eps("2", "10.0.0.1", ""), false, false},
		{"endpoints: address", eps("1", "10.0.0.1", ""), eps("2", "10.0.0.2", ""), true, false},
		{"endpoints: hostname", eps("1", "10.0.0.1", "a"), eps("2", "10.0.0.1", "b"), true, false},
		{"pod: address", &object.Pod{Version: "1", PodIPs: []string{"10.0.0.1"}}, &object.Pod{Version: "2", PodIPs: []string{"10.0.0.2"}}, true, false},
		{"pod: status only", &object.Pod{Version: "1", PodIPs: []string{"10.0.0.1"}}, &object.Pod{Version: "2", PodIPs: []string{"10.0.0.1"}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			c := &Controller{now: func() time.Time { return now }}
			c.update(tc.old, tc.new)
			if got := c.Modified(kubernetes.ModifiedInternal) == 1000; got != tc.internal {
				t.Errorf("internal serial moved %v, want %v", got, tc.internal)
			}
			if got := c.Modified(kubernetes.ModifiedExternal) == 1000; got != tc.external {
				t.Errorf("external serial moved %v, want %v", got, tc.external)
			}
		})
	}
	now := time.Unix(2000, 0)
	c := &Controller{now: func() time.Time { return now }}
	c.add(eps("1", "10.0.0.1", ""))
	if c.Modified(kubernetes.ModifiedInternal) != 2000 {
		t.Error("an added object did not move the serial")
	}
}
