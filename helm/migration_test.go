package helm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/testbed"
)

// kubeadmDNSService is the kube-dns Service as kubeadm creates it, in front
// of its CoreDNS Deployment.
func kubeadmDNSService() *corev1.Service {
	lbl := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: lbl,
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: testbed.DNSServiceIP,
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}
}

// TestMigrationAdoptsKubeDNS runs docs/migration.md's Helm steps against a
// real kube-apiserver with the Helm SDK: install beside kubeadm's kube-dns
// Service (service.create=false) without touching it, then adopt it by its
// Helm ownership metadata and upgrade, after which it selects only the
// nodedns pods and sends 53/UDP and 53/TCP to the fallback port, on the same
// ClusterIP.
func TestMigrationAdoptsKubeDNS(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	services := tb.Client().CoreV1().Services("kube-system")
	if _, err := services.Create(ctx, kubeadmDNSService(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &tb.Kubeconfig
	ns := DefaultNamespace
	getter.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	chrt, err := Load()
	if err != nil {
		t.Fatal(err)
	}

	// Step 1: nodedns beside CoreDNS; kube-dns stays as it is.
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = DefaultRelease, ns
	if _, err := install.RunWithContext(ctx, chrt, map[string]any{"service": map[string]any{"create": false}}); err != nil {
		t.Fatalf("helm install with service.create=false: %v", err)
	}
	svc, err := services.Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector["k8s-app"] != "kube-dns" || len(svc.Spec.Ports) != 3 {
		t.Fatalf("step 1 changed kube-dns: %+v", svc.Spec)
	}

	// Without ownership metadata Helm refuses to take the Service over.
	// (service.create=true is given explicitly: an upgrade without values
	// reuses the release's, as `helm upgrade` without --set does.)
	createSvc := map[string]any{"service": map[string]any{"create": true}}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = ns
	if _, err := upgrade.RunWithContext(ctx, DefaultRelease, chrt, createSvc); err == nil {
		t.Fatal("helm upgrade took kube-dns over without ownership metadata")
	}

	// Step 2: point kube-dns at the nodedns backends with one JSON patch,
	// then adopt it. Helm's own patch on adoption is computed against the
	// previous release, which did not hold the Service: it would keep
	// kubeadm's k8s-app selector and metrics port and, merging ports by
	// number alone, leave 53/TCP on target port 53.
	patch := `[{"op":"replace","path":"/spec/selector","value":{"app.kubernetes.io/name":"nodedns","app.kubernetes.io/instance":"nodedns"}},
	{"op":"replace","path":"/spec/ports","value":[{"name":"dns","port":53,"protocol":"UDP","targetPort":5301},{"name":"dns-tcp","port":53,"protocol":"TCP","targetPort":5301}]}]`
	svc, err = services.Patch(ctx, "kube-dns", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch kube-dns: %v", err)
	}
	svc.Annotations["meta.helm.sh/release-name"] = DefaultRelease
	svc.Annotations["meta.helm.sh/release-namespace"] = ns
	svc.Labels["app.kubernetes.io/managed-by"] = "Helm"
	if _, err := services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	upgrade = action.NewUpgrade(cfg)
	upgrade.Namespace = ns
	if _, err := upgrade.RunWithContext(ctx, DefaultRelease, chrt, createSvc); err != nil {
		t.Fatalf("helm upgrade adopting kube-dns: %v", err)
	}
	svc, err = services.Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != testbed.DNSServiceIP {
		t.Errorf("ClusterIP %s, want %s kept", svc.Spec.ClusterIP, testbed.DNSServiceIP)
	}
	if want := map[string]string{"app.kubernetes.io/name": "nodedns", "app.kubernetes.io/instance": DefaultRelease}; !mapsEqual(svc.Spec.Selector, want) {
		t.Errorf("selector %v, want %v (kubeadm's k8s-app would still pick CoreDNS pods, which do not listen on 5301)", svc.Spec.Selector, want)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s %s %d->%s", p.Name, p.Protocol, p.Port, p.TargetPort.String()))
	}
	if want := []string{"dns UDP 53->5301", "dns-tcp TCP 53->5301"}; !slices.Equal(ports, want) {
		t.Errorf("ports %q, want %q", ports, want)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
