package helm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServiceKeptOnUninstall: the kube-dns Service carries Helm's keep
// policy unless service.keep is false, so that helm uninstall does not
// delete every pod's nameserver with the release; other annotations stay.
func TestServiceKeptOnUninstall(t *testing.T) {
	for _, tc := range []struct {
		values      string
		keep, extra bool
	}{
		{"", true, false},
		{"service: {annotations: {a: b}}", true, true},
		{"service: {keep: false}", false, false},
		{"service: {keep: false, annotations: {a: b}}", false, true},
	} {
		_, objs, _ := render(t, tc.values)
		var svc *corev1.Service
		for _, o := range objs {
			if s, ok := o.Obj.(*corev1.Service); ok && s.Name == "kube-dns" {
				svc = s
			}
		}
		if svc == nil {
			t.Fatalf("%q: no kube-dns Service rendered", tc.values)
		}
		if got := svc.Annotations["helm.sh/resource-policy"] == "keep"; got != tc.keep {
			t.Errorf("%q: resource-policy keep = %v, want %v (annotations %v)", tc.values, got, tc.keep, svc.Annotations)
		}
		if tc.extra && svc.Annotations["a"] != "b" {
			t.Errorf("%q: the extra annotation is lost: %v", tc.values, svc.Annotations)
		}
	}
}
