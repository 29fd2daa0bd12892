package kubespec

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Index names of the informers' stores. Services have no index by
// object.ServiceKey: it is their store key rearranged (SvcIndex).
const (
	svcIPIndex    = "ServiceIP"         // every ClusterIP
	svcExtIPIndex = "ServiceExternalIP" // every external IP
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
	snapshotDir       string          // the stores' snapshot (offline.go); "": none
	dnsAddr           string          // the server block's DNS address (offline.go's peerServing)
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

	client  *apiClient
	now     func() time.Time // always non-nil
	release *releaser

	svcs      *store[*object.Service]
	nss       *store[*object.Namespace]
	pods      *store[*object.Pod]
	slices    []*store[*object.Endpoints] // headless, unlabelled
	informers []cache.Controller

	// What the backend knows with no API server (offline.go).
	reach       reach
	started     atomic.Bool   // the servers have started: HasSynced no longer opens them
	openEarly   atomic.Bool   // no API server and no other backend: open the ports unsynced
	dnsAddr     string        // the server block's DNS address, host:port; "": not known
	offline     atomic.Bool   // serving the snapshot until the watches sync
	changes     atomic.Uint64 // events of every store, for the snapshot's writer
	snapshotDir string

	stopMu  sync.Mutex // guards stopped and the close of stop
	stopped bool
	stop    chan struct{}
}

// newController builds the informers; Run starts them.
func newController(client *apiClient, o controllerOptions) (*Controller, error) {
	c := &Controller{client: client, now: o.now, stop: make(chan struct{}), release: newReleaser(), snapshotDir: o.snapshotDir, dnsAddr: o.dnsAddr}
	if c.now == nil {
		c.now = time.Now
	}
	headless, unlabelled, err := Selectors(o.selector)
	if err != nil {
		return nil, err
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: c.add, UpdateFunc: c.update, DeleteFunc: c.delete}

	c.svcs = newStore(map[string]func(*object.Service) []string{svcIPIndex: serviceIPs, svcExtIPIndex: serviceExternalIPs})
	svcCtl := newInformer(
		c.listWatch(client.core, "services", func(opts metav1.ListOptions) metav1.ListOptions { return withLabels(opts, o.selector) }),
		&corev1.Service{}, h, c.svcs,
		object.DefaultProcessor(object.ToService, nil),
	)
	c.informers = append(c.informers, svcCtl)

	toEndpoints := object.EndpointSliceToEndpoints
	if o.zonal {
		toEndpoints = object.EndpointSliceToEndpointsWithZones
	}
	svcOf := func(m metav1.Object) []*object.Service {
		return c.SvcIndex(object.ServiceKey(m.GetLabels()[discoveryv1.LabelServiceName], m.GetNamespace()))
	}
	for _, sel := range []labels.Selector{headless, unlabelled} {
		// One recorder per informer: a recorder keeps the object being
		// processed, and the two informers process at the same time.
		latency := &object.EndpointLatencyRecorder{ServiceFunc: svcOf}
		st := newStore(map[string]func(*object.Endpoints) []string{epKeyIndex: endpointsKey, epIPIndex: endpointsIPs})
		ctl := newInformer(
			c.listWatch(client.discovery, "endpointslices", func(opts metav1.ListOptions) metav1.ListOptions { return withLabels(opts, sel) }),
			&discoveryv1.EndpointSlice{}, h, st,
			object.DefaultProcessor(toEndpoints, latency),
		)
		c.slices = append(c.slices, st)
		c.informers = append(c.informers, ctl)
	}

	c.nss = newStore[*object.Namespace](nil)
	nsCtl := newInformer(
		c.listWatch(client.core, "namespaces", func(opts metav1.ListOptions) metav1.ListOptions { return withLabels(opts, o.namespaceSelector) }),
		&corev1.Namespace{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.changes.Add(1) },
			UpdateFunc: func(any, any) { c.changes.Add(1) },
			DeleteFunc: func(any) { c.changes.Add(1) },
		}, c.nss,
		object.DefaultProcessor(object.ToNamespace, nil),
	)
	c.informers = append(c.informers, nsCtl)

	// The Pod store exists without pods verified too, empty, as the
	// plugin's does: PodIndex then finds nothing.
	c.pods = newStore(map[string]func(*object.Pod) []string{podIPIndex: podIPs})
	podCtl := newInformer(
		c.listWatch(client.core, "pods", func(opts metav1.ListOptions) metav1.ListOptions { return withPhases(withLabels(opts, o.selector)) }),
		&corev1.Pod{}, h, c.pods,
		object.DefaultProcessor(object.ToPod, nil),
	)
	if o.pods {
		c.informers = append(c.informers, podCtl)
	}
	return c, nil
}

// newInformer is object.NewIndexerInformer with the store given: the
// processor converts each object (object.DefaultProcessor) into st.
func newInformer(lw cache.ListerWatcher, objType runtime.Object, h cache.ResourceEventHandler, st cache.Indexer, process object.ProcessorBuilder) cache.Controller {
	return cache.New(&cache.Config{
		Queue:         cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{KeyFunction: cache.MetaNamespaceKeyFunc, KnownObjects: st}),
		ListerWatcher: lw,
		ObjectType:    objType,
		Process:       process(st, h),
	})
}

// listWatch lists and watches resource of every namespace through rc,
// with the options opts makes. Each list, and each watch that starts with
// the current objects (a streamed list), tells the releaser: its garbage
// is returned to the OS once the events stop.
func (c *Controller) listWatch(rc rest.Interface, resource string, opts func(metav1.ListOptions) metav1.ListOptions) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			c.release.listed()
			o = opts(o)
			obj, err := rc.Get().Resource(resource).VersionedParams(&o, c.client.params).Do(ctx).Get()
			c.reach.result(err, c.now())
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				c.release.listed()
			}
			o = opts(o)
			o.Watch = true
			w, err := rc.Get().Resource(resource).VersionedParams(&o, c.client.params).Watch(ctx)
			c.reach.result(err, c.now())
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, c.client)
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
	go c.release.run(c.stop)
	go c.startOffline()
	if c.snapshotDir != "" {
		go c.writeSnapshots()
	}
	<-c.stop
}

// HasSynced reports whether every informer has listed once, or the
// snapshot is served in their place. The kubernetes plugin opens the DNS
// ports once it is true (or after startup_timeout): until the servers
// have started (Started), it is also true once the API server is known
// unreachable and no other backend serves the DNS address, so that a
// backend starting with no API server answers external names at once
// (offline.go).
func (c *Controller) HasSynced() bool {
	if c.informersSynced() || c.offline.Load() {
		return true
	}
	return !c.started.Load() && c.openEarly.Load()
}

// Started tells the controller that the servers have started: from now
// on HasSynced is the watches' (or the snapshot's) alone, which is what
// the plugin answers by (SERVFAIL for unknown names while false) and
// what /ready reports.
func (c *Controller) Started() { c.started.Store(true) }

// informersSynced reports whether every informer has listed once.
func (c *Controller) informersSynced() bool {
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
func (c *Controller) ServiceList() []*object.Service { return c.svcs.list() }

// EndpointsList returns the endpoints of every watched slice.
func (c *Controller) EndpointsList() []*object.Endpoints {
	var all []*object.Endpoints
	for _, s := range c.slices {
		all = append(all, s.list()...)
	}
	return all
}

// ServiceImportList returns nothing: ServiceImports are not watched.
func (c *Controller) ServiceImportList() []*object.ServiceImport { return nil }

// SvcIndex returns the Services of key object.ServiceKey(name, namespace),
// name.namespace: a Service's name has no dot (it is a DNS label), so the
// first dot ends it.
func (c *Controller) SvcIndex(key string) []*object.Service {
	name, ns, ok := strings.Cut(key, ".")
	if !ok {
		return nil
	}
	s, ok := c.svcs.get(ns + "/" + name)
	if !ok || s.Index != key {
		return nil
	}
	return []*object.Service{s}
}

// SvcIndexReverse returns the Services with ClusterIP ip.
func (c *Controller) SvcIndexReverse(ip string) []*object.Service {
	return c.svcs.byIndex(svcIPIndex, ip)
}

// SvcExtIndexReverse returns the Services with external IP ip.
func (c *Controller) SvcExtIndexReverse(ip string) []*object.Service {
	return c.svcs.byIndex(svcExtIPIndex, ip)
}

// SvcImportIndex returns nothing: ServiceImports are not watched.
func (c *Controller) SvcImportIndex(string) []*object.ServiceImport { return nil }

// PodIndex returns the Pods with address ip (pods verified only).
func (c *Controller) PodIndex(ip string) []*object.Pod {
	return c.pods.byIndex(podIPIndex, ip)
}

// EpIndex returns the endpoints of the slices of Service key
// (object.EndpointsKey), from both slice watches.
func (c *Controller) EpIndex(key string) []*object.Endpoints {
	var eps []*object.Endpoints
	for _, s := range c.slices {
		eps = append(eps, s.byIndex(epKeyIndex, key)...)
	}
	return eps
}

// EpIndexReverse returns the endpoints holding address ip, from both
// slice watches.
func (c *Controller) EpIndexReverse(ip string) []*object.Endpoints {
	var eps []*object.Endpoints
	for _, s := range c.slices {
		eps = append(eps, s.byIndex(epIPIndex, ip)...)
	}
	return eps
}

// McEpIndex returns nothing: multicluster slices are not watched.
func (c *Controller) McEpIndex(string) []*object.MultiClusterEndpoints { return nil }

// GetNodeByName asks the API server for Node name (one round trip).
func (c *Controller) GetNodeByName(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := c.client.core.Get().Resource("nodes").Name(name).VersionedParams(&metav1.GetOptions{}, c.client.params).Do(ctx).Into(n)
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// GetNamespaceByName returns Namespace name from the store.
func (c *Controller) GetNamespaceByName(name string) (*object.Namespace, error) {
	ns, ok := c.nss.get(name)
	if !ok {
		return nil, fmt.Errorf("namespace %s not found", name)
	}
	return ns, nil
}
