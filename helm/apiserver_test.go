package helm

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/testbed"
)

// TestInstallAndRBAC installs the default rendering on a new cluster
// into a real kube-apiserver with strict server-side field validation, then
// checks, as the chart's ServiceAccount, that its ClusterRole grants list
// and watch of services, endpointslices and namespaces and nothing else.
func TestInstallAndRBAC(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	r, err := Render(nil, onEmptyCluster())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(tb.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(tb.Client().Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	for _, m := range r.Manifests {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.Content), &u.Object); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if u.GetNamespace() != "" {
			res = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		// Strict: the API server rejects unknown and duplicate fields
		// instead of dropping them.
		if _, err := res.Create(ctx, u, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Errorf("create %s %s from %s: %v", gvk.Kind, u.GetName(), m.Name, err)
		}
	}
	if t.Failed() {
		return
	}
	// The same path refuses a field the type lacks: the check above is real.
	bogus := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "strict-check", "namespace": "default"},
		"data":     map[string]any{"a": "b"}, "dta": map[string]any{"a": "b"},
	}}
	if _, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("default").
		Create(ctx, bogus, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err == nil {
		t.Errorf("a ConfigMap with an unknown field was accepted: validation is not strict")
	}
	svc, err := tb.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-dns ClusterIP %s", svc.Spec.ClusterIP)
	}

	cfg, err := tb.ServiceAccountRestConfig(ctx, DefaultNamespace, "nodedns")
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	lw := []struct {
		what  string
		list  func() error
		watch func() error
	}{
		{"services", func() error { _, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err },
			func() error { return stopWatch(sa.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})) }},
		{"endpointslices", func() error {
			_, err := sa.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
			func() error { return stopWatch(sa.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{})) }},
		{"namespaces", func() error { _, err := sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); return err },
			func() error { return stopWatch(sa.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})) }},
		// fallback.allowedNetworks' default lists nodes: the fallback
		// listener's source policy watches the Nodes' pod CIDRs and
		// addresses (backend/srcacl).
		{"nodes", func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
			func() error { return stopWatch(sa.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})) }},
	}
	for _, c := range lw {
		if err := c.list(); err != nil {
			t.Errorf("list %s: %v", c.what, err)
		}
		if err := c.watch(); err != nil {
			t.Errorf("watch %s: %v", c.what, err)
		}
	}
	denied := []struct {
		what string
		call func() error
	}{
		{"list secrets", func() error { _, err := sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err }},
		{"list pods", func() error { _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"list configmaps", func() error { _, err := sa.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); return err }},
		{"list endpoints", func() error { _, err := sa.CoreV1().Endpoints("").List(ctx, metav1.ListOptions{}); return err }},
		{"get service", func() error {
			_, err := sa.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
			return err
		}},
		{"create service", func() error {
			_, err := sa.CoreV1().Services("default").Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53}}},
			}, metav1.CreateOptions{})
			return err
		}},
		{"delete namespace", func() error { return sa.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}) }},
	}
	for _, d := range denied {
		if err := d.call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", d.what, err)
		}
	}

	// The grant is enough: the backend, with the chart's Corefile and only
	// the ServiceAccount's credentials, syncs (its /ready answers) and
	// answers for the Services just created.
	if testing.Short() {
		t.Skip("-short: not building nodedns-backend")
	}
	kubeconfig, err := tb.ServiceAccountKubeconfig(ctx, DefaultNamespace, "nodedns")
	if err != nil {
		t.Fatal(err)
	}
	addr := runChartBackend(t, ctx, kubeconfig)
	for name, want := range map[string]string{
		"kube-dns.kube-system.svc.cluster.local":         "10.96.0.10",
		"nodedns-fallback.kube-system.svc.cluster.local": "10.96.0.11",
	} {
		if got := lookupA(t, addr, name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v, want %s", name, got, want)
		}
	}
}

type watcher interface{ Stop() }

func stopWatch[W watcher](w W, err error) error {
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}
