package testbed

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// testTimeout bounds each test's API calls; starting the testbed has its own.
const testTimeout = 3 * time.Minute

// kubeDNS returns the kube-dns Service and an EndpointSlice with one ready
// endpoint, as a cluster's DNS add-on and the EndpointSlice controller would
// have them.
func kubeDNS(endpointIP, nodeName string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	ready := true
	port := int32(53)
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns, dnsTCP := "dns", "dns-tcp"
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kube-dns-testbed",
			Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: "kube-dns",
				discoveryv1.LabelManagedBy:   "testbed",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{endpointIP},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &nodeName,
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: &dns, Protocol: &udp, Port: &port},
			{Name: &dnsTCP, Protocol: &tcp, Port: &port},
		},
	}
	return svc, eps
}

func TestControlPlane(t *testing.T) {
	tb := StartForTest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := tb.Client()

	t.Run("objects", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "objects"}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc, eps := kubeDNS("10.244.0.5", "node-a")
		svc.Namespace, eps.Namespace = "objects", "objects"
		if _, err := c.CoreV1().Services("objects").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DiscoveryV1().EndpointSlices("objects").Create(ctx, eps, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		gotSvc, err := c.CoreV1().Services("objects").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gotSvc.Spec.ClusterIP != DNSServiceIP {
			t.Errorf("ClusterIP = %s, want %s", gotSvc.Spec.ClusterIP, DNSServiceIP)
		}
		list, err := c.DiscoveryV1().EndpointSlices("objects").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Endpoints[0].Addresses[0] != "10.244.0.5" {
			t.Errorf("EndpointSlices = %+v, want one with 10.244.0.5", list.Items)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", tb.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		kc := kubernetes.NewForConfigOrDie(cfg)
		v, err := kc.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != KubernetesVersion {
			t.Errorf("server version %s, want %s", v.GitVersion, KubernetesVersion)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		m, err := tb.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(m), "apiserver_request_total") {
			t.Error("kube-apiserver /metrics lacks apiserver_request_total")
		}
		if tb.APIServerPID() <= 0 {
			t.Errorf("APIServerPID() = %d", tb.APIServerPID())
		}
	})

	t.Run("rbac", func(t *testing.T) {
		// A user no binding names may do nothing.
		cfg, err := tb.RestConfigFor("nobody", "some-group")
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("user without bindings listing Services: err = %v, want Forbidden", err)
		}

		// A ServiceAccount bound to a ClusterRole may do what it grants, and
		// nothing else.
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "read-services"},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"},
			}},
		}
		if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "read-services"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "read-services"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "reader"}},
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		saCfg, err := tb.ServiceAccountRestConfig(ctx, "kube-system", "reader")
		if err != nil {
			t.Fatal(err)
		}
		sa := kubernetes.NewForConfigOrDie(saCfg)
		if _, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("ServiceAccount listing Services it may read: %v", err)
		}
		_, err = sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("ServiceAccount listing Secrets: err = %v, want Forbidden", err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		_, err = sa.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("ServiceAccount creating a Service: err = %v, want Forbidden", err)
		}

		// The kubeconfig form works the same.
		path, err := tb.ServiceAccountKubeconfig(ctx, "kube-system", "reader")
		if err != nil {
			t.Fatal(err)
		}
		kcfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubernetes.NewForConfigOrDie(kcfg).CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("ServiceAccount kubeconfig listing Services: %v", err)
		}
	})

	// Last: the other subtests share this API server.
	t.Run("restart keeps data", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Data: map[string]string{"k": "v"}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := tb.APIServerPID()
		if err := tb.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		if after := tb.APIServerPID(); after == before {
			t.Errorf("kube-apiserver pid %d unchanged by restart", after)
		}
		got, err := c.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["k"] != "v" {
			t.Errorf("ConfigMap after restart = %v", got.Data)
		}
	})

	// Stop here, and again in the cleanup StartForTest registered.
	t.Run("stop", func(t *testing.T) {
		dir := tb.Dir
		if err := tb.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := tb.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if _, err := c.Discovery().ServerVersion(); err == nil {
			t.Error("API server still answers after Stop")
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) && os.Getenv("NODEDNS_TESTBED_KEEP") != "1" {
			t.Errorf("testbed dir %s left behind: %v", dir, err)
		}
	})
}
