package helm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/testbed"
)

// kubeadmDNSService is the kube-dns Service as kubeadm creates it, in front
// of its CoreDNS Deployment, at ip.
func kubeadmDNSService(ip string) *corev1.Service {
	lbl := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: lbl,
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}
}

// helmConfig is the Helm SDK's configuration for tb, as `helm -n
// kube-system` with tb's kubeconfig.
func helmConfig(t *testing.T, tb *testbed.Testbed) *action.Configuration {
	t.Helper()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &tb.Kubeconfig
	ns := DefaultNamespace
	getter.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// frontendSetting returns the value of the frontend's --flag as rendered
// against the cluster: the DaemonSet's command line holds every setting.
func frontendSetting(t *testing.T, r *Rendering, flag string) string {
	t.Helper()
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := DaemonSet(objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "frontend" {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				return v
			}
		}
		t.Fatalf("the frontend has no --%s: %q", flag, c.Args)
	}
	t.Fatalf("no frontend container in the DaemonSet")
	return ""
}

// TestInstallWithoutAdoption runs the chart's lookups against a real
// kube-apiserver. On a cluster without kube-dns the chart creates it
// (10.96.0.10, the fallback at .11) and keeps it through an upgrade. On a
// cluster as kubeadm leaves it (here with kube-dns at 10.96.0.20, not the
// chart's default) `helm install` with no values leaves kubeadm's Service
// exactly as it is, binds its ClusterIP, derives the fallback address from
// it, and refuses a service.clusterIP that differs and a fallback address
// another Service holds, naming it; helm uninstall leaves kube-dns.
func TestInstallWithoutAdoption(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	services := tb.Client().CoreV1().Services("kube-system")
	cfg := helmConfig(t, tb)
	chrt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	cluster := Options{Cluster: tb.RestConfig()}
	// The hooks' Jobs need a Job controller and nodes; the handoff itself
	// is TestHandoffAsChartRole's.
	install := func(values map[string]any) error {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.DisableHooks = DefaultRelease, DefaultNamespace, true
		_, err := in.RunWithContext(ctx, chrt, values)
		return err
	}
	uninstall := func() {
		t.Helper()
		un := action.NewUninstall(cfg)
		un.DisableHooks, un.Wait = true, true
		un.Timeout = time.Minute
		if _, err := un.Run(DefaultRelease); err != nil {
			t.Fatalf("helm uninstall: %v", err)
		}
	}

	// A cluster without kube-dns: the chart creates it, and owns it.
	if err := install(nil); err != nil {
		t.Fatalf("helm install on a cluster without kube-dns: %v", err)
	}
	svc, err := services.Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kube-dns not created: %v", err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || svc.Annotations["meta.helm.sh/release-name"] != DefaultRelease {
		t.Errorf("kube-dns %s, annotations %v: want 10.96.0.10 owned by the release", svc.Spec.ClusterIP, svc.Annotations)
	}
	if fb, err := services.Get(ctx, "nodedns-fallback", metav1.GetOptions{}); err != nil || fb.Spec.ClusterIP != "10.96.0.11" {
		t.Errorf("fallback Service: %v %v, want 10.96.0.11", fb, err)
	}
	// An upgrade renders the Service it owns again (a release that dropped
	// it would leave it to the keep policy alone).
	up := action.NewUpgrade(cfg)
	up.Namespace, up.DisableHooks = DefaultNamespace, true
	rel, err := up.RunWithContext(ctx, DefaultRelease, chrt, map[string]any{})
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if !strings.Contains(rel.Manifest, "name: kube-dns") {
		t.Errorf("the upgraded release does not hold kube-dns:\n%s", rel.Manifest)
	}
	uninstall()
	if _, err := services.Get(ctx, "kube-dns", metav1.GetOptions{}); err != nil {
		t.Errorf("kube-dns after helm uninstall: %v (service.keep)", err)
	}
	if err := services.Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A cluster as kubeadm leaves it, at a ClusterIP other than the
	// chart's default.
	const kubeadmIP = "10.96.0.20"
	if _, err := services.Create(ctx, kubeadmDNSService(kubeadmIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := Render(nil, cluster)
	if err != nil {
		t.Fatalf("render against the cluster: %v", err)
	}
	if got := frontendSetting(t, r, "service-ip"); got != kubeadmIP {
		t.Errorf("frontend --service-ip %q, want the existing kube-dns's %s", got, kubeadmIP)
	}
	if got := frontendSetting(t, r, "fallback"); got != "10.96.0.21:53" {
		t.Errorf("frontend --fallback %q, want 10.96.0.21:53 (kube-dns + 1)", got)
	}
	for _, m := range r.Manifests {
		if strings.HasSuffix(m.Name, "/service.yaml") {
			t.Errorf("kube-dns rendered although kubeadm's exists:\n%s", m.Content)
		}
	}
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"service": map[string]any{"clusterIP": "10.96.0.10"}},
			"service.clusterIP is 10.96.0.10 but Service kube-system/kube-dns exists with ClusterIP 10.96.0.20"},
	} {
		if _, err := Render(tc.values, cluster); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.values, err, tc.want)
		}
	}
	// The derived fallback address taken by another Service.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.21", Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := tb.Client().CoreV1().Services("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "fallback.clusterIP 10.96.0.21 (the kube-dns ClusterIP + 1) is taken by Service default/other"
	if err := install(nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("helm install with the fallback address taken: %v, want %q", err, want)
	}
	if err := tb.Client().CoreV1().Services("default").Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// helm install with no values: kube-dns untouched.
	if err := install(nil); err != nil {
		t.Fatalf("helm install beside kubeadm's kube-dns: %v", err)
	}
	checkKubeadmService := func(when string) {
		t.Helper()
		svc, err := services.Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		var ports []string
		for _, p := range svc.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%s %s %d->%s", p.Name, p.Protocol, p.Port, p.TargetPort.String()))
		}
		if svc.Spec.ClusterIP != kubeadmIP || !mapsEqual(svc.Spec.Selector, map[string]string{"k8s-app": "kube-dns"}) ||
			!slices.Equal(ports, []string{"dns UDP 53->53", "dns-tcp TCP 53->53", "metrics TCP 9153->9153"}) ||
			svc.Annotations["meta.helm.sh/release-name"] != "" || svc.Labels["app.kubernetes.io/managed-by"] != "" {
			t.Errorf("%s: kubeadm's kube-dns changed: %s %v %q %v %v", when, svc.Spec.ClusterIP, svc.Spec.Selector, ports, svc.Annotations, svc.Labels)
		}
	}
	checkKubeadmService("after helm install")
	if fb, err := services.Get(ctx, "nodedns-fallback", metav1.GetOptions{}); err != nil || fb.Spec.ClusterIP != "10.96.0.21" {
		t.Errorf("fallback Service: %v, want 10.96.0.21", err)
	}
	uninstall()
	checkKubeadmService("after helm uninstall")
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
