package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/testbed"
)

// The ServiceMonitor CRD is read from the Prometheus Operator's Go module,
// downloaded at test time, so the repository holds no copy to keep in step.
// The generated CRD YAML lives only in the module's root path (its
// pkg/apis/monitoring submodule holds the Go types). v0.85.0 is the newest
// version of the root path the module proxy serves; the ServiceMonitor
// fields the chart writes are the same in pkg/apis/monitoring v0.95.2.
const (
	promOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	promOperatorVersion = "v0.85.0"
	// serviceMonitorCRDFile is the CRD as the operator's release bundle
	// ships it, relative to the module's root.
	serviceMonitorCRDFile = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
)

var serviceMonitors = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}

// TestServiceMonitorCRD installs the Prometheus Operator's ServiceMonitor
// CRD into a real kube-apiserver and creates the chart's ServiceMonitor,
// for each values file that changes it, with strict field validation: the
// API server checks every field against the CRD's OpenAPI schema. A broken
// copy is refused, so the check has teeth.
func TestServiceMonitorCRD(t *testing.T) {
	if r := testbed.Unavailable(); r != "" {
		t.Skip("testbed: " + r)
	}
	crd := serviceMonitorCRD(t)
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	installCRD(t, ctx, tb, crd)
	dyn, err := dynamic.NewForConfig(tb.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}

	var created *unstructured.Unstructured
	for _, tc := range []struct {
		name   string
		values string
	}{
		{"defaults", "prometheus: {monitor: {enabled: true}}"},
		{"all monitor values", "prometheus:\n  monitor: {enabled: true, namespace: monitoring, interval: 15s, additionalLabels: {release: prom}}"},
		{"compound interval, renamed", "nameOverride: dns\ncustomLabels: {team: platform}\nprometheus: {monitor: {enabled: true, interval: 1m30s}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, objs, _ := render(t, tc.values)
			n := 0
			for _, o := range objs {
				u, ok := o.Obj.(*unstructured.Unstructured)
				if !ok || o.GVK.Kind != "ServiceMonitor" {
					continue
				}
				n++
				ensureNamespace(t, ctx, tb, u.GetNamespace())
				res := dyn.Resource(serviceMonitors).Namespace(u.GetNamespace())
				if _, err := res.Create(ctx, u, strict); err != nil {
					t.Errorf("create ServiceMonitor %s/%s from %s: %v", u.GetNamespace(), u.GetName(), o.Source, err)
					continue
				}
				created = u
				// The next case may render the same name.
				if err := res.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete ServiceMonitor %s/%s: %v", u.GetNamespace(), u.GetName(), err)
				}
			}
			if n == 0 {
				t.Fatalf("no ServiceMonitor rendered in %s", Kinds(objs))
			}
		})
	}
	if created == nil {
		return
	}

	// Copies of an accepted ServiceMonitor with one fault each: the same
	// path refuses them, so the acceptance above means something.
	for _, tc := range []struct {
		name   string
		mutate func(u *unstructured.Unstructured) error
		want   func(error) bool
	}{
		{"unknown field in an endpoint", func(u *unstructured.Unstructured) error {
			return setEndpoint0(u, "scrapeTimout", "10s")
		}, apierrors.IsBadRequest},
		{"interval not a duration", func(u *unstructured.Unstructured) error {
			return setEndpoint0(u, "interval", "often")
		}, apierrors.IsInvalid},
		{"relabeling sourceLabels a string", func(u *unstructured.Unstructured) error {
			return setEndpoint0(u, "relabelings", []any{map[string]any{"sourceLabels": "__meta_kubernetes_pod_node_name", "targetLabel": "node"}})
		}, apierrors.IsInvalid},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			u := created.DeepCopy()
			u.SetName("broken")
			if err := tc.mutate(u); err != nil {
				t.Fatal(err)
			}
			_, err := dyn.Resource(serviceMonitors).Namespace(u.GetNamespace()).Create(ctx, u, strict)
			if err == nil {
				t.Fatalf("accepted:\n%s", mustYAML(t, u))
			}
			if !tc.want(err) {
				t.Errorf("refused with an unexpected reason (%v): %v", apierrors.ReasonForError(err), err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// serviceMonitorCRD downloads the Prometheus Operator module with the go
// command and returns its ServiceMonitor CRD. It skips t when the go
// command or the module proxy is not available.
func serviceMonitorCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found (%v): it downloads the ServiceMonitor CRD", err)
	}
	mod := promOperatorModule + "@" + promOperatorVersion
	// Outside any module, so the download cannot touch this one's go.mod.
	cmd := exec.Command(goBin, "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var dl struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(out, &dl); err != nil && runErr == nil {
		t.Fatalf("go mod download -json %s: %v in output %q", mod, err, out)
	}
	switch {
	case dl.Error != "":
		t.Skipf("go mod download %s: %s", mod, dl.Error)
	case runErr != nil:
		t.Skipf("go mod download %s: %v: %s", mod, runErr, bytes.TrimSpace(stderr.Bytes()))
	case dl.Dir == "":
		t.Fatalf("go mod download -json %s: no Dir in %s", mod, out)
	}
	file := filepath.Join(dl.Dir, serviceMonitorCRDFile)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s in %s: %v", serviceMonitorCRDFile, mod, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if crd.Spec.Group != serviceMonitors.Group || crd.Spec.Names.Plural != serviceMonitors.Resource {
		t.Fatalf("%s defines %s.%s, want %s.%s", file, crd.Spec.Names.Plural, crd.Spec.Group, serviceMonitors.Resource, serviceMonitors.Group)
	}
	t.Logf("ServiceMonitor CRD: %s from %s", serviceMonitorCRDFile, mod)
	return crd
}

// installCRD creates crd and waits until the API server serves it.
func installCRD(t *testing.T, ctx context.Context, tb *testbed.Testbed, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	cs, err := apiextensions.NewForConfig(tb.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	var last *apiextensionsv1.CustomResourceDefinition
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last, err = crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range last.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		conds := []apiextensionsv1.CustomResourceDefinitionCondition(nil)
		if last != nil {
			conds = last.Status.Conditions
		}
		t.Fatalf("CRD %s not Established: %v; conditions %+v", crd.Name, err, conds)
	}
}

func ensureNamespace(t *testing.T, ctx context.Context, tb *testbed.Testbed, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := tb.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func setEndpoint0(u *unstructured.Unstructured, field string, value any) error {
	eps, _, err := unstructured.NestedSlice(u.Object, "spec", "endpoints")
	if err != nil || len(eps) == 0 {
		return fmt.Errorf("spec.endpoints: %v (%d)", err, len(eps))
	}
	eps[0].(map[string]any)[field] = value
	return unstructured.SetNestedSlice(u.Object, eps, "spec", "endpoints")
}

func mustYAML(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
