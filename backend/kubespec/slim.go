package kubespec

import (
	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// newInformer is object.NewIndexerInformer with slim as the queue's
// transformer. The plugin converts each object to its own small type only
// when the informer processes it; until then the reflector holds every
// object of a list as decoded, managed fields, annotations and owner
// references included, and on a relist the old store is still held beside
// them. client-go applies a queue's transformer in the reflector's
// temporary store of a streamed list too, so with slim a list holds only
// what the conversion reads: the relist peak falls by what slim drops.
func newInformer(lw cache.ListerWatcher, objType runtime.Object, h cache.ResourceEventHandler, indexers cache.Indexers, builder object.ProcessorBuilder) (cache.Indexer, cache.Controller) {
	store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
	cfg := &cache.Config{
		Queue: cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{
			KeyFunction:  cache.MetaNamespaceKeyFunc,
			KnownObjects: store,
			Transformer:  slim,
		}),
		ListerWatcher: lw,
		ObjectType:    objType,
		Process:       builder(store, h),
	}
	return store, cache.New(cfg)
}

// slim returns a copy of a Service, EndpointSlice or Namespace with only
// the fields that CoreDNS's conversions (object.ToService,
// object.EndpointSliceToEndpoints[WithZones], object.ToNamespace) and its
// endpoint latency metric read; other objects pass unchanged. It is
// idempotent: client-go may apply it twice to one object.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return &corev1.Service{
			ObjectMeta: meta(o.ObjectMeta, nil, nil),
			Spec: corev1.ServiceSpec{
				Type:         o.Spec.Type,
				ExternalName: o.Spec.ExternalName,
				ClusterIP:    o.Spec.ClusterIP,
				ClusterIPs:   o.Spec.ClusterIPs,
				ExternalIPs:  o.Spec.ExternalIPs,
				Ports:        o.Spec.Ports,
			},
			Status: corev1.ServiceStatus{LoadBalancer: o.Status.LoadBalancer},
		}, nil
	case *discoveryv1.EndpointSlice:
		eps := make([]discoveryv1.Endpoint, len(o.Endpoints))
		for i, e := range o.Endpoints {
			eps[i] = discoveryv1.Endpoint{
				Addresses:  e.Addresses,
				Conditions: e.Conditions,
				Hostname:   e.Hostname,
				NodeName:   e.NodeName,
				Zone:       e.Zone,
			}
			if e.TargetRef != nil {
				eps[i].TargetRef = &corev1.ObjectReference{Kind: e.TargetRef.Kind, Name: e.TargetRef.Name}
			}
		}
		return &discoveryv1.EndpointSlice{
			// The Service's name label gives the records their Service;
			// the trigger time feeds the endpoint latency histogram.
			ObjectMeta:  meta(o.ObjectMeta, []string{discoveryv1.LabelServiceName}, []string{corev1.EndpointsLastChangeTriggerTime}),
			AddressType: o.AddressType,
			Endpoints:   eps,
			Ports:       o.Ports,
		}, nil
	case *corev1.Namespace:
		return &corev1.Namespace{ObjectMeta: meta(o.ObjectMeta, nil, nil)}, nil
	}
	return obj, nil
}

// meta keeps an object's identity, version and deletion mark, and the
// labels and annotations named.
func meta(m metav1.ObjectMeta, labels, annotations []string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            pick(m.Labels, labels),
		Annotations:       pick(m.Annotations, annotations),
	}
}

// pick returns the entries of m under keys, or nil when there are none.
func pick(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
