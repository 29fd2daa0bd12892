package helm

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestDualStackServiceIPs: on a cluster whose kube-dns is dual-stack, the
// frontend owns both ClusterIPs in iptables mode (listen, service-ip) and
// the release table sends to both; a single-stack kube-dns gives one.
func TestDualStackServiceIPs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		clusterIPs []any
		wantIPs    string
		wantListen string
	}{
		{"dual-stack", []any{"10.96.0.10", "fd00:10:96::a"}, "10.96.0.10,fd00:10:96::a", "169.254.20.10:53,10.96.0.10:53,[fd00:10:96::a]:53"},
		{"single-stack", []any{"10.96.0.10"}, "10.96.0.10", "169.254.20.10:53,10.96.0.10:53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newEmptyCluster()
			svc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": "kube-dns", "namespace": "kube-system"},
				"spec":     map[string]any{"clusterIP": tc.clusterIPs[0], "clusterIPs": tc.clusterIPs},
			}}
			if _, err := c.client.Resource(kinds["v1/Service"].gvr).Namespace("kube-system").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			r, err := Render(map[string]any{"mode": "iptables"}, Options{lookup: c})
			if err != nil {
				t.Fatal(err)
			}
			for flag, want := range map[string]string{"service-ip": tc.wantIPs, "release-to": tc.wantIPs, "listen": tc.wantListen} {
				if got := frontendSetting(t, r, flag); got != want {
					t.Errorf("--%s=%q, want %q", flag, got, want)
				}
			}
		})
	}
}
