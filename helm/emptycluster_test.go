package helm

import (
	"fmt"

	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// emptyCluster answers the templates' lookup calls as a new cluster does
// where nothing of the chart's concern exists yet: Namespace kube-system
// (with the label the API server gives every namespace) and no Service,
// DaemonSet or other Namespace. Rendering with it is what `helm install`
// renders on such a cluster; without it (Options{}) the rendering is
// `helm template`'s, which the chart refuses with the default values.
type emptyCluster struct{ client dynamic.Interface }

// kinds are the kinds the chart looks up, with their resource and scope.
var kinds = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	list       string
}{
	"v1/Namespace":      {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false, "NamespaceList"},
	"v1/Service":        {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true, "ServiceList"},
	"apps/v1/DaemonSet": {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, true, "DaemonSetList"},
}

func newEmptyCluster() emptyCluster {
	lists := map[schema.GroupVersionResource]string{}
	for _, k := range kinds {
		lists[k.gvr] = k.list
	}
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName("kube-system")
	ns.SetLabels(map[string]string{"kubernetes.io/metadata.name": "kube-system"})
	return emptyCluster{dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, ns)}
}

func (c emptyCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	k, ok := kinds[apiVersion+"/"+kind]
	if !ok {
		return nil, false, fmt.Errorf("the test cluster has no kind %s %s", apiVersion, kind)
	}
	return c.client.Resource(k.gvr), k.namespaced, nil
}

var _ engine.ClientProvider = emptyCluster{}

// onEmptyCluster is Options{} rendered as `helm install` on a new cluster.
func onEmptyCluster() Options { return Options{lookup: newEmptyCluster()} }
