package kubespec

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// studyService is Service i as the study's clusters have it: one ClusterIP.
func studyService(i int) *object.Service {
	name := fmt.Sprintf("svc-%d", i)
	return &object.Service{Name: name, Namespace: "mem", Version: "1", Index: object.ServiceKey(name, "mem"),
		ClusterIPs: []string{fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}}
}

var keep []any

// TestStoreSize measures the heap the Service store takes per Service
// beside client-go's indexer with the indexes this package had before
// (key, ClusterIP, external IP), side by side in one process: the
// compact store must take less. The objects are the same in both and
// counted in neither; -v prints the figures.
func TestStoreSize(t *testing.T) {
	const n = 10000
	svcs := make([]*object.Service, n)
	for i := range svcs {
		svcs[i] = studyService(i)
	}
	keyIndex := func(o any) ([]string, error) { return []string{o.(*object.Service).Index}, nil }
	ipIndex := func(o any) ([]string, error) { return o.(*object.Service).ClusterIPs, nil }
	extIndex := func(o any) ([]string, error) { return o.(*object.Service).ExternalIPs, nil }

	before := heapInUse()
	old := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{svcKeyIndexBefore: keyIndex, svcIPIndex: ipIndex, svcExtIPIndex: extIndex})
	for _, s := range svcs {
		if err := old.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	oldBytes := heapInUse() - before

	before = heapInUse()
	st := newStore(map[string]func(*object.Service) []string{svcIPIndex: serviceIPs, svcExtIPIndex: serviceExternalIPs})
	for _, s := range svcs {
		if err := st.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	newBytes := heapInUse() - before
	keep = append(keep, old, st, svcs)

	t.Logf("Service store at %d Services: client-go indexer %d bytes per Service, compact store %d", n, oldBytes/n, newBytes/n)
	if newBytes >= oldBytes {
		t.Errorf("compact store %d bytes, client-go's indexer %d: no saving", newBytes, oldBytes)
	}
}

// svcKeyIndexBefore is the Service key index this package kept before.
const svcKeyIndexBefore = "ServiceNameNamespace"

// TestClientSize measures what the Controller's API client takes beside
// client-go's full clientset.
func TestClientSize(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10}
	before := heapInUse()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	csBytes := heapInUse() - before
	before = heapInUse()
	ac, err := newAPIClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acBytes := heapInUse() - before
	keep = append(keep, cs, ac)
	t.Logf("clientset %d bytes, the Controller's two REST clients %d", csBytes, acBytes)
	if acBytes >= csBytes {
		t.Errorf("API client %d bytes, clientset %d: no saving", acBytes, csBytes)
	}
}
