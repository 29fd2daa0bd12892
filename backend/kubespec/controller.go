package kubespec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin/kubernetes"
	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Index names of the informers' stores.
const (
	svcKeyIndex   = "ServiceNameNamespace" // object.ServiceKey
	svcIPIndex    = "ServiceIP"            // every ClusterIP
	svcExtIPIndex = "ServiceExternalIP"    // every external IP
	epKeyIndex    = "EndpointNameNamespace"
	epIPIndex     = "EndpointsIP"
	podIPIndex    = "PodIP"
)

// podPhases keeps finished Pods out of the Pod watch, as the kubernetes
// plugin does with pods verified.
const podPhases = "status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"

// errStopped is returned by a second Stop.
var errStopped = errors.New("controller already stopped")

// controllerOptions configures a Controller.
type controllerOptions struct {
	selector          labels.Selector // Services, and ANDed into both slice watches; nil: all
	namespaceSelector labels.Selector // Namespaces; nil: all
	pods              bool            // watch Pods (pods verified)
	zonal             bool            // endpoints keep their zone (zonal)
	now               func() time.Time
}

// Controller is what the kubernetes plugin reads its records from (its
// APIConn): informers for Services, Namespaces and, with pods verified,
// Pods, as the plugin's own controller has, and two EndpointSlice
// informers instead of one (Selectors). The two selectors exclude each
// other, so a slice is in at most one store; a slice whose labels move it
// from one set to the other is deleted from one and added to the other by
// its watches. ServiceImports are not watched (multicluster is refused).
type Controller struct {
	// modified and extModified are the Unix seconds of the last change
	// that alters internal or external records: the zones' SOA serials.
	modified, extModified atomic.Int64

	client clientset.Interface
	now    func() time.Time // always non-nil

	svcs, nss, pods cache.Indexer
	slices          []cache.Indexer // headless, unlabelled
	informers       []cache.Controller

	stopMu  sync.Mutex // guards stopped and the close of stop
	stopped bool
	stop    chan struct{}
}

// newController builds the informers; Run starts them.
func newController(client clientset.Interface, o controllerOptions) (*Controller, error) {
	c := &Controller{client: client, now: o.now, stop: make(chan struct{})}
	if c.now == nil {
		c.now = time.Now
	}
	headless, unlabelled, err := Selectors(o.selector)
	if err != nil {
		return nil, err
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: c.add, UpdateFunc: c.update, DeleteFunc: c.delete}

	var svcCtl cache.Controller
	c.svcs, svcCtl = object.NewIndexerInformer(
		listWatch(client, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services(corev1.NamespaceAll).List(ctx, withLabels(opts, o.selector))
		}, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Services(corev1.NamespaceAll).Watch(ctx, withLabels(opts, o.selector))
		}),
		&corev1.Service{}, h,
		cache.Indexers{svcKeyIndex: serviceKey, svcIPIndex: serviceIPs, svcExtIPIndex: serviceExternalIPs},
		object.DefaultProcessor(object.ToService, nil),
	)
	c.informers = append(c.informers, svcCtl)

	toEndpoints := object.EndpointSliceToEndpoints
	if o.zonal {
		toEndpoints = object.EndpointSliceToEndpointsWithZones
	}
	latency := &object.EndpointLatencyRecorder{ServiceFunc: func(m metav1.Object) []*object.Service {
		return c.SvcIndex(object.ServiceKey(m.GetLabels()[discoveryv1.LabelServiceName], m.GetNamespace()))
	}}
	for _, sel := range []labels.Selector{headless, unlabelled} {
		store, ctl := object.NewIndexerInformer(
			listWatch(client, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).List(ctx, withLabels(opts, sel))
			}, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).Watch(ctx, withLabels(opts, sel))
			}),
			&discoveryv1.EndpointSlice{}, h,
			cache.Indexers{epKeyIndex: endpointsKey, epIPIndex: endpointsIPs},
			object.DefaultProcessor(toEndpoints, latency),
		)
		c.slices = append(c.slices, store)
		c.informers = append(c.informers, ctl)
	}

	var nsCtl cache.Controller
	c.nss, nsCtl = object.NewIndexerInformer(
		listWatch(client, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Namespaces().List(ctx, withLabels(opts, o.namespaceSelector))
		}, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Namespaces().Watch(ctx, withLabels(opts, o.namespaceSelector))
		}),
		&corev1.Namespace{}, cache.ResourceEventHandlerFuncs{}, cache.Indexers{},
		object.DefaultProcessor(object.ToNamespace, nil),
	)
	c.informers = append(c.informers, nsCtl)

	// The Pod store exists without pods verified too, empty, as the
	// plugin's does: PodIndex then finds nothing.
	var podCtl cache.Controller
	c.pods, podCtl = object.NewIndexerInformer(
		listWatch(client, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods(corev1.NamespaceAll).List(ctx, withPhases(withLabels(opts, o.selector)))
		}, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods(corev1.NamespaceAll).Watch(ctx, withPhases(withLabels(opts, o.selector)))
		}),
		&corev1.Pod{}, h, cache.Indexers{podIPIndex: podIPs},
		object.DefaultProcessor(object.ToPod, nil),
	)
	if o.pods {
		c.informers = append(c.informers, podCtl)
	}
	return c, nil
}

func listWatch(client clientset.Interface, list cache.ListWithContextFunc, w cache.WatchFuncWithContext) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: w}, client)
}

func withLabels(opts metav1.ListOptions, s labels.Selector) metav1.ListOptions {
	if s != nil {
		opts.LabelSelector = s.String()
	}
	return opts
}

func withPhases(opts metav1.ListOptions) metav1.ListOptions {
	if opts.FieldSelector != "" {
		opts.FieldSelector += ","
	}
	opts.FieldSelector += podPhases
	return opts
}

// Run starts the informers and returns when Stop is called.
func (c *Controller) Run() {
	for _, inf := range c.informers {
		go inf.Run(c.stop)
	}
	<-c.stop
}

// HasSynced reports whether every informer has listed once.
func (c *Controller) HasSynced() bool {
	for _, inf := range c.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Stop stops the informers; a second call returns an error.
func (c *Controller) Stop() error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped {
		return errStopped
	}
	c.stopped = true
	close(c.stop)
	return nil
}

// Modified returns the Unix seconds of the last change of the mode's
// records; 0 for multicluster, which is not watched.
func (c *Controller) Modified(mode kubernetes.ModifiedMode) int64 {
	switch mode {
	case kubernetes.ModifiedInternal:
		return c.modified.Load()
	case kubernetes.ModifiedExternal:
		return c.extModified.Load()
	}
	return 0
}

// ServiceList returns every Service in the store.
func (c *Controller) ServiceList() []*object.Service { return listOf[*object.Service](c.svcs.List()) }

// EndpointsList returns the endpoints of every watched slice.
func (c *Controller) EndpointsList() []*object.Endpoints {
	var all []any
	for _, s := range c.slices {
		all = append(all, s.List()...)
	}
	return listOf[*object.Endpoints](all)
}

// ServiceImportList returns nothing: ServiceImports are not watched.
func (c *Controller) ServiceImportList() []*object.ServiceImport { return nil }

// SvcIndex returns the Services of key object.ServiceKey(name, namespace).
func (c *Controller) SvcIndex(key string) []*object.Service {
	return byIndex[*object.Service](c.svcs, svcKeyIndex, key)
}

// SvcIndexReverse returns the Services with ClusterIP ip.
func (c *Controller) SvcIndexReverse(ip string) []*object.Service {
	return byIndex[*object.Service](c.svcs, svcIPIndex, ip)
}

// SvcExtIndexReverse returns the Services with external IP ip.
func (c *Controller) SvcExtIndexReverse(ip string) []*object.Service {
	return byIndex[*object.Service](c.svcs, svcExtIPIndex, ip)
}

// SvcImportIndex returns nothing: ServiceImports are not watched.
func (c *Controller) SvcImportIndex(string) []*object.ServiceImport { return nil }

// PodIndex returns the Pods with address ip (pods verified only).
func (c *Controller) PodIndex(ip string) []*object.Pod {
	return byIndex[*object.Pod](c.pods, podIPIndex, ip)
}

// EpIndex returns the endpoints of the slices of Service key
// (object.EndpointsKey), from both slice watches.
func (c *Controller) EpIndex(key string) []*object.Endpoints {
	var eps []*object.Endpoints
	for _, s := range c.slices {
		eps = append(eps, byIndex[*object.Endpoints](s, epKeyIndex, key)...)
	}
	return eps
}

// EpIndexReverse returns the endpoints holding address ip, from both
// slice watches.
func (c *Controller) EpIndexReverse(ip string) []*object.Endpoints {
	var eps []*object.Endpoints
	for _, s := range c.slices {
		eps = append(eps, byIndex[*object.Endpoints](s, epIPIndex, ip)...)
	}
	return eps
}

// McEpIndex returns nothing: multicluster slices are not watched.
func (c *Controller) McEpIndex(string) []*object.MultiClusterEndpoints { return nil }

// GetNodeByName asks the API server for Node name (one round trip).
func (c *Controller) GetNodeByName(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// GetNamespaceByName returns Namespace name from the store.
func (c *Controller) GetNamespaceByName(name string) (*object.Namespace, error) {
	o, ok, err := c.nss.GetByKey(name)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	if !ok {
		return nil, fmt.Errorf("namespace %s not found", name)
	}
	ns, isNS := o.(*object.Namespace)
	if !isNS {
		return nil, fmt.Errorf("namespace %s: store holds %T", name, o)
	}
	return ns, nil
}

func byIndex[T any](s cache.Indexer, index, key string) []T {
	objs, err := s.ByIndex(index, key)
	if err != nil {
		return nil
	}
	return listOf[T](objs)
}

func listOf[T any](objs []any) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}
