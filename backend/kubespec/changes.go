package kubespec

import (
	"maps"
	"slices"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The event handlers keep the zones' SOA serials (RFC 1035 3.3.13): every
// change visible in DNS moves Modified to the current second. Updates that
// change nothing DNS shows (a slice's conditions other than ready, a Pod's
// status) leave it alone, so the serial follows the records, not the churn.

func (c *Controller) add(any) {
	c.release.event()
	c.changes.Add(1)
	c.modified.Store(c.now().Unix())
}

func (c *Controller) delete(any) {
	c.release.event()
	c.changes.Add(1)
	c.modified.Store(c.now().Unix())
}

func (c *Controller) update(oldObj, newObj any) {
	c.release.event()
	c.changes.Add(1)
	if o, ok := oldObj.(metav1.Object); ok {
		if n, ok := newObj.(metav1.Object); ok && o.GetResourceVersion() == n.GetResourceVersion() {
			return
		}
	}
	internal, external := changed(oldObj, newObj)
	now := c.now().Unix()
	if internal {
		c.modified.Store(now)
	}
	if external {
		c.extModified.Store(now)
	}
}

// changed reports whether an update alters internal records (the cluster
// zone and reverse zones) and external ones (external IPs).
func changed(oldObj, newObj any) (internal, external bool) {
	switch n := newObj.(type) {
	case *object.Service:
		o, ok := oldObj.(*object.Service)
		if !ok {
			return true, true
		}
		ports := !samePorts(o, n)
		external = ports || !slices.Equal(o.ExternalIPs, n.ExternalIPs)
		internal = ports || o.ExternalName != n.ExternalName || !slices.Equal(o.ClusterIPs, n.ClusterIPs)
		return internal, external
	case *object.Endpoints:
		o, ok := oldObj.(*object.Endpoints)
		return !ok || !sameEndpoints(o, n), false
	case *object.Pod:
		o, ok := oldObj.(*object.Pod)
		return !ok || !slices.Equal(o.PodIPs, n.PodIPs), false
	}
	return true, false
}

func samePorts(a, b *object.Service) bool {
	return slices.EqualFunc(a.Ports, b.Ports, func(x, y corev1.ServicePort) bool {
		return x.Name == y.Name && x.Port == y.Port && x.Protocol == y.Protocol
	})
}

// sameEndpoints compares what records are made of: addresses with their
// hostnames and target names (endpoint_pod_names), ports, and zones (set
// only with zonal).
func sameEndpoints(a, b *object.Endpoints) bool {
	if !maps.Equal(a.Zones, b.Zones) {
		return false
	}
	return slices.EqualFunc(a.Subsets, b.Subsets, func(x, y object.EndpointSubset) bool {
		return slices.EqualFunc(x.Addresses, y.Addresses, func(p, q object.EndpointAddress) bool {
			return p.IP == q.IP && p.Hostname == q.Hostname && p.TargetRefName == q.TargetRefName
		}) && slices.Equal(x.Ports, y.Ports)
	})
}
