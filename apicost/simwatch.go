package apicost

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodedns/nodedns/backend/kubespec"
)

// Design is the DNS (or proxy) agent a simulated node runs.
type Design string

// The designs a simulated node can run.
const (
	// DesignKubeProxy is kube-proxy v1.36's watch set (RunProxyWatch).
	DesignKubeProxy Design = "kube-proxy"
	// DesignCoreDNS is a stock CoreDNS (v1.15.0, kubeadm's Corefile:
	// kubernetes plugin with pods insecure) on every node: Services,
	// every EndpointSlice, Namespaces.
	DesignCoreDNS Design = "coredns-ds"
	// DesignNodedns is nodedns's backend with its default `endpointslices
	// spec`: Services, Namespaces, and the two EndpointSlice watches of
	// kubespec.Selectors.
	DesignNodedns Design = "nodedns"
)

// Designs are the simulated designs in the order the study runs them.
var Designs = []Design{DesignKubeProxy, DesignCoreDNS, DesignNodedns}

// ParseDesign checks a design's name.
func ParseDesign(s string) (Design, error) {
	for _, d := range Designs {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("design %q: want one of %v", s, Designs)
}

// Content types the real clients ask for: all three send protobuf and
// accept protobuf, then JSON (captured from nodedns-backend with both
// stanzas and from kube-proxy's informers by TestSimulated*Requests).
const (
	protobuf    = "application/vnd.kubernetes.protobuf"
	acceptTypes = "application/vnd.kubernetes.protobuf,application/json"
)

// WatchSpec is one list+watch a client opens: the resource and the selectors
// sent with every LIST and WATCH request.
type WatchSpec struct {
	Resource      string // "services", "endpointslices", "namespaces", "servicecidrs", "nodes"
	LabelSelector string
	FieldSelector string
}

// ClientSpec is what a design's client sends besides its watches.
type ClientSpec struct {
	ContentType string
	Accept      string
	UserAgent   string
}

// DesignWatches returns the watches one node of design d opens, as the real
// client does (RunProxyWatch for kube-proxy, the kubernetes plugin's
// dnsControl in coredns v1.15.0 plugin/kubernetes/controller.go for CoreDNS,
// backend/kubespec/controller.go for nodedns).
func DesignWatches(d Design, node string) ([]WatchSpec, ClientSpec, error) {
	switch d {
	case DesignKubeProxy:
		noProxyName, err := labels.NewRequirement(labelServiceProxyName, selection.DoesNotExist, nil)
		if err != nil {
			return nil, ClientSpec{}, err
		}
		noHeadless, err := labels.NewRequirement(labelHeadless, selection.DoesNotExist, nil)
		if err != nil {
			return nil, ClientSpec{}, err
		}
		return []WatchSpec{
			{Resource: "services", LabelSelector: labels.NewSelector().Add(*noProxyName).String(),
				FieldSelector: fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()},
			{Resource: "endpointslices", LabelSelector: labels.NewSelector().Add(*noHeadless).String()},
			{Resource: "servicecidrs"},
			{Resource: "nodes", FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()},
		}, ClientSpec{ContentType: protobuf, Accept: acceptTypes, UserAgent: "nodedns-apicost/simulated-kube-proxy"}, nil
	case DesignCoreDNS:
		// No label selector (the plugin's `labels` option is unset in
		// kubeadm's Corefile); the Pod watch exists only with pods verified.
		return []WatchSpec{
			{Resource: "services"},
			{Resource: "endpointslices"},
			{Resource: "namespaces"},
		}, ClientSpec{ContentType: protobuf, Accept: acceptTypes, UserAgent: "nodedns-apicost/simulated-coredns"}, nil
	case DesignNodedns:
		headless, unlabelled, err := kubespec.Selectors(nil)
		if err != nil {
			return nil, ClientSpec{}, err
		}
		return []WatchSpec{
			{Resource: "services"},
			{Resource: "endpointslices", LabelSelector: headless.String()},
			{Resource: "endpointslices", LabelSelector: unlabelled.String()},
			{Resource: "namespaces"},
		}, ClientSpec{ContentType: protobuf, Accept: acceptTypes, UserAgent: "nodedns-apicost/simulated-nodedns"}, nil
	}
	return nil, ClientSpec{}, fmt.Errorf("design %q: want one of %v", d, Designs)
}

// listWatch is the ListerWatcher of one WatchSpec: the typed client's List and
// Watch with the spec's selectors, wrapped like the informers of all three
// real clients (ToListWatcherWithWatchListSemantics), so that streaming lists,
// paging, bookmarks and resume follow client-go's defaults.
func listWatch(c kubernetes.Interface, w WatchSpec) (cache.ListerWatcher, runtime.Object, error) {
	tweak := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector, o.FieldSelector = w.LabelSelector, w.FieldSelector
		return o
	}
	var lw cache.ListWatch
	var obj runtime.Object
	all := metav1.NamespaceAll
	switch w.Resource {
	case "services":
		obj = &corev1.Service{}
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Services(all).List(ctx, tweak(o))
		}
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Services(all).Watch(ctx, tweak(o))
		}
	case "endpointslices":
		obj = &discoveryv1.EndpointSlice{}
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.DiscoveryV1().EndpointSlices(all).List(ctx, tweak(o))
		}
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.DiscoveryV1().EndpointSlices(all).Watch(ctx, tweak(o))
		}
	case "namespaces":
		obj = &corev1.Namespace{}
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Namespaces().List(ctx, tweak(o))
		}
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Namespaces().Watch(ctx, tweak(o))
		}
	case "servicecidrs":
		obj = &networkingv1.ServiceCIDR{}
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.NetworkingV1().ServiceCIDRs().List(ctx, tweak(o))
		}
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.NetworkingV1().ServiceCIDRs().Watch(ctx, tweak(o))
		}
	case "nodes":
		obj = &corev1.Node{}
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, tweak(o))
		}
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Nodes().Watch(ctx, tweak(o))
		}
	default:
		return nil, nil, fmt.Errorf("resource %q: not simulated", w.Resource)
	}
	return cache.ToListWatcherWithWatchListSemantics(&lw, c), obj, nil
}

// countingStore is a reflector's store that keeps nothing: the API server
// sees the same requests whatever the client keeps, and thousands of
// simulated caches of every Service would not fit in memory. It counts the
// (re)lists and events.
type countingStore struct {
	replaces *atomic.Int64 // shared by all reflectors of the process
	events   *atomic.Int64
	synced   atomic.Bool
}

func (s *countingStore) Add(any) error    { s.events.Add(1); return nil }
func (s *countingStore) Update(any) error { s.events.Add(1); return nil }
func (s *countingStore) Delete(any) error { s.events.Add(1); return nil }
func (s *countingStore) Resync() error    { return nil }
func (s *countingStore) Replace(items []any, _ string) error {
	s.replaces.Add(1)
	s.synced.Store(true)
	return nil
}

// SimOptions are the simulated nodes of one process.
type SimOptions struct {
	Kubeconfig string
	Design     Design
	First      int // nodes First .. First+Nodes-1 (Node objects node-NNN)
	Nodes      int
	// Ramp is how many nodes start at once; the next batch starts when these
	// synced. It bounds the memory of the initial lists; 0: all at once.
	Ramp int
	// StatusFile, if set, is rewritten every StatusInterval with SimStatus.
	StatusFile string
}

// SimStatus is what a simulator process reports in its status file.
type SimStatus struct {
	Synced   int   // nodes whose every watch listed once
	Replaces int64 // lists completed (initial and relists) over all watches
	Events   int64 // watch events received over all watches
}

// StatusInterval is how often a simulator rewrites its status file.
const StatusInterval = 500 * time.Millisecond

func (s SimStatus) String() string {
	return fmt.Sprintf("synced %d replaces %d events %d\n", s.Synced, s.Replaces, s.Events)
}

// ParseSimStatus reads a status file's text.
func ParseSimStatus(text string) (SimStatus, error) {
	var s SimStatus
	if _, err := fmt.Sscanf(text, "synced %d replaces %d events %d", &s.Synced, &s.Replaces, &s.Events); err != nil {
		return s, fmt.Errorf("simulator status %q: %w", text, err)
	}
	return s, nil
}

// SimClientConfig is the rest.Config of one simulated node: the design's
// content type, Accept and user agent, and a connection of its own.
func SimClientConfig(base *rest.Config, cs ClientSpec) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.ContentType = cs.ContentType
	cfg.AcceptContentTypes = cs.Accept
	cfg.UserAgent = cs.UserAgent
	// A Proxy function makes client-go build a transport of its own for
	// this client instead of sharing a cached one: every node has its own
	// TCP connection (HTTP/2 multiplexes its watches on it), as real nodes
	// do. It returns no proxy.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return cfg
}

// RunSimWatchers runs o.Nodes simulated nodes of o.Design in this process,
// each with its own client, connection and reflectors (client-go's, the
// same list/watch/resume/bookmark/streaming-list code as the real clients'
// informers), until ctx ends.
func RunSimWatchers(ctx context.Context, o SimOptions) error {
	base, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %s: %w", o.Kubeconfig, err)
	}
	if o.Nodes < 1 {
		return fmt.Errorf("nodes %d: want at least 1", o.Nodes)
	}
	var replaces, events atomic.Int64
	type node struct{ stores []*countingStore }
	nodes := make([]node, 0, o.Nodes)
	var mu sync.Mutex // guards nodes
	status := func() SimStatus {
		mu.Lock()
		defer mu.Unlock()
		st := SimStatus{Replaces: replaces.Load(), Events: events.Load()}
		for _, n := range nodes {
			all := true
			for _, s := range n.stores {
				all = all && s.synced.Load()
			}
			if all {
				st.Synced++
			}
		}
		return st
	}
	if o.StatusFile != "" {
		go func() {
			t := time.NewTicker(StatusInterval)
			defer t.Stop()
			for {
				tmp := o.StatusFile + ".tmp"
				if err := os.WriteFile(tmp, []byte(status().String()), 0o644); err == nil {
					_ = os.Rename(tmp, o.StatusFile)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	ramp := o.Ramp
	if ramp <= 0 {
		ramp = o.Nodes
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < o.Nodes; i++ {
		name := nodeName(o.First + i)
		specs, cs, err := DesignWatches(o.Design, name)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(SimClientConfig(base, cs))
		if err != nil {
			return fmt.Errorf("client of %s: %w", name, err)
		}
		var n node
		for _, w := range specs {
			lw, obj, err := listWatch(client, w)
			if err != nil {
				return err
			}
			st := &countingStore{replaces: &replaces, events: &events}
			n.stores = append(n.stores, st)
			r := cache.NewReflectorWithOptions(lw, obj, st, cache.ReflectorOptions{Name: name + "/" + w.Resource})
			wg.Add(1)
			go func() { defer wg.Done(); r.RunWithContext(ctx) }()
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		if (i+1)%ramp == 0 {
			// Wait for this batch before the next.
			for status().Synced < i+1 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	<-ctx.Done()
	return nil
}
