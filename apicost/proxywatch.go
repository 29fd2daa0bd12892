package apicost

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Label keys kube-proxy filters on (k8s.io/api/core/v1.IsHeadlessService and
// kube-proxy's apis.LabelServiceProxyName).
const (
	labelHeadless         = "service.kubernetes.io/headless"
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
)

// proxyResync is kube-proxy's default --config-sync-period: a local resync
// of the informer caches, no API call.
const proxyResync = 15 * time.Minute

// RunProxyWatch opens exactly the watches of kube-proxy v1.36
// (cmd/kube-proxy/app/server.go, pkg/proxy/node.go) as node, and keeps them
// until ctx ends:
//
//   - Services without the service-proxy-name label and with
//     spec.clusterIP!=None;
//   - EndpointSlices without the headless label;
//   - ServiceCIDRs (MultiCIDRServiceAllocator is GA and locked on);
//   - its own Node (metadata.name=node).
//
// Like kube-proxy it asks for protobuf. It does nothing with the objects:
// the API server's side of the cost is the same, the node's side (rule
// programming) is not measured. Once every informer synced it creates
// syncedFile, if given.
func RunProxyWatch(ctx context.Context, kubeconfig, node, syncedFile string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "nodedns-apicost/kube-proxy-watch"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	noProxyName, err := labels.NewRequirement(labelServiceProxyName, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	noHeadless, err := labels.NewRequirement(labelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	unfiltered := informers.NewSharedInformerFactoryWithOptions(client, proxyResync)
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(client, proxyResync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.NewSelector().Add(*noHeadless).String()
		}))
	serviceFactory := informers.NewSharedInformerFactoryWithOptions(client, proxyResync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.NewSelector().Add(*noProxyName).String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
		}))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, proxyResync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}))

	// Registering a handler is what makes a factory start an informer.
	noop := cache.ResourceEventHandlerFuncs{}
	for _, inf := range []cache.SharedIndexInformer{
		serviceFactory.Core().V1().Services().Informer(),
		sliceFactory.Discovery().V1().EndpointSlices().Informer(),
		unfiltered.Networking().V1().ServiceCIDRs().Informer(),
		nodeFactory.Core().V1().Nodes().Informer(),
	} {
		if _, err := inf.AddEventHandler(noop); err != nil {
			return fmt.Errorf("add handler: %w", err)
		}
	}
	factories := []informers.SharedInformerFactory{unfiltered, sliceFactory, serviceFactory, nodeFactory}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync: %w", typ, ctx.Err())
			}
		}
	}
	if syncedFile != "" {
		if err := os.WriteFile(syncedFile, nil, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", syncedFile, err)
		}
	}
	<-ctx.Done()
	for _, f := range factories {
		f.Shutdown()
	}
	return nil
}
