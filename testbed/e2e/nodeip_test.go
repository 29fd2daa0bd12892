package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// zalandoCorefile is kubeadm's Corefile on 127.0.0.1:5300, behind dnsmasq
// (health and ready on loopback ports nothing else of the node uses).
const zalandoCorefile = `.:5300 {
    bind 127.0.0.1
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    reload
    loadbalance
}
`

// TestNodeIPFromDnsmasqDaemonSet: kubelet's clusterDNS is each node's own
// IP, where a hostNetwork DaemonSet "dns" runs dnsmasq (bind-interfaces,
// listen-address = status.hostIP) in front of CoreDNS on 127.0.0.1:5300
// (a Zalando-style setup), with a client pod per node resolving; then
// docs/migration.md "From a dnsmasq + CoreDNS DaemonSet" step by step:
// helm install in node-ip mode limited to labelled nodes, the old
// DaemonSet kept off them, the nodes labelled one at a time, helm upgrade
// without the selector, the old DaemonSet deleted. The guide expects a
// short outage per node switch (measured, and allowed there only).
func TestNodeIPFromDnsmasqDaemonSet(t *testing.T) {
	if r := testbed.RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if r := testbed.DnsmasqUnavailable(); r != "" {
		t.Skip("dnsmasq image: " + r)
	}
	if err := testbed.RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	imgDir := t.TempDir()
	archives, err := testbed.BuildPodImages(ctx, imgDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, build := range []func(context.Context, string) (testbed.Archive, error){testbed.BuildBackendImage, testbed.BuildFrontendImage, testbed.BuildDnsmasqImage} {
		a, err := build(ctx, imgDir)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, a)
	}
	backend, frontend := archives[len(archives)-3], archives[len(archives)-2]

	start := time.Now()
	tb, nodes := testbed.StartRealNodesForTestWith(t, []string{"node-a", "node-b"}, testbed.RealNodeOptions{Images: archives, ClusterDNSNodeIP: true})
	c := tb.Client()
	t.Logf("control plane and two nodes up in %s", time.Since(start).Round(time.Millisecond))
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}

	// a. The dnsmasq + CoreDNS DaemonSet, pods pointed at their node's IP.
	deployDnsmasqDaemonSet(ctx, t, tb, backend.Ref, 0)
	webIP := deployWeb(ctx, t, tb)
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "dns", 2); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}
	results := t.TempDir()
	checks := []string{
		"web=" + webIP,
		"web-headless=*",
		"kubernetes.default=" + testbed.KubernetesServiceIP,
		externalName + "=" + externalIP,
	}
	var groups []string
	for _, n := range nodes {
		startGroupClient(ctx, t, tb, results, n.Name, "client-"+n.Name, n.Name, checks)
		checkNameserver(ctx, t, tb, nodes, "client-"+n.Name, n.IP.String())
		groups = append(groups, n.Name)
	}
	cfg := helmConfig(t, tb)
	steps := &stepLog{}
	installed := false
	defer func() { // after the report (defers run last in, first out)
		if installed {
			_, _ = action.NewUninstall(cfg).Run(helm.DefaultRelease)
		}
	}()
	// The guide's step 2 leaves a node's DNS unanswered while it switches.
	switched := map[string]string{}
	defer reportGroups(t, nodes, results, steps, groups, func(step, group string) (string, int) {
		if strings.HasPrefix(step, switched[group]) && switched[group] != "" {
			// Measured: 185-228 lost (2.7 s from the label to the
			// frontend's bind, ~1.5 s of it with nothing on port 53).
			return "docs/migration.md step 2: nothing answers the node IP between dnsmasq's exit and the frontend's bind", 600
		}
		return "", 0
	})
	steps.begin("h0. dnsmasq + CoreDNS DaemonSet on the node IP (clusterDNS = node IP)", "kubectl -n kube-system get ds dns")
	time.Sleep(10 * time.Second)

	// h1. Step 1: nodedns limited to labelled nodes, the old DaemonSet
	// kept off them.
	chrt, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	tag := frontend.Ref[strings.LastIndexByte(frontend.Ref, ':')+1:]
	values := func(selector bool) map[string]any {
		v := map[string]any{
			"mode":     "node-ip",
			"service":  map[string]any{"create": false},
			"fallback": map[string]any{"clusterIP": "10.96.0.11", "allowedNetworks": []any{testbed.PodSubnet, testbed.NodeSubnet}},
			"image": map[string]any{
				"frontend":   map[string]any{"repository": images.DefaultRegistry + "/" + images.FrontendName},
				"backend":    map[string]any{"repository": images.DefaultRegistry + "/" + images.BackendName},
				"tag":        tag,
				"pullPolicy": "Never",
			},
		}
		if selector {
			v["nodeSelector"] = map[string]any{"nodedns.io/enabled": "true"}
		}
		return v
	}
	steps.begin("h1. helm install --set mode=node-ip --set nodeSelector.nodedns\\.io/enabled=true; kubectl patch daemonset dns (affinity)", "docs/migration.md dnsmasq step 1")
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	if _, err := install.RunWithContext(ctx, chrt, values(true)); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	installed = true
	before := dnsPodNames(ctx, t, tb)
	at := time.Now()
	kubectl(ctx, t, tb, "-n", "kube-system", "patch", "daemonset", "dns", "--type=merge", "-p", dnsmasqPatch)
	if err := waitUntil(ctx, func() bool {
		ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "dns", metav1.GetOptions{})
		return err == nil && ds.Status.ObservedGeneration >= ds.Generation
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("h1: dns DaemonSet patch observed after %s", time.Since(at).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)
	if after := dnsPodNames(ctx, t, tb); after != before {
		t.Errorf("h1: the patch replaced the dns pods: %s before, %s after", before, after)
	}

	// h2, h3. Step 2: nodes labelled one at a time.
	for i, n := range nodes {
		name := fmt.Sprintf("h%d. kubectl label node %s nodedns.io/enabled=true", 2+i, n.Name)
		switched[n.Name] = name[:3]
		steps.begin(name, "docs/migration.md dnsmasq step 2")
		t.Logf("h%d: %s", 2+i, watchSwitch(ctx, t, tb, n))
		time.Sleep(10 * time.Second)
	}

	// h4, h5. Step 3: the selector removed, the old DaemonSet deleted.
	steps.begin("h4. helm upgrade without the nodeSelector", "helm upgrade nodedns ./helm/nodedns -n kube-system -f nodedns-values.yaml --set mode=node-ip --set service.create=false")
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helm.DefaultNamespace
	if _, err := upgrade.RunWithContext(ctx, helm.DefaultRelease, chrt, values(false)); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	waitRolledOut(ctx, t, tb, "nodedns", len(nodes))
	time.Sleep(10 * time.Second)
	steps.begin("h5. kubectl -n kube-system delete daemonset dns", "kubectl -n kube-system delete daemonset dns")
	kubectl(ctx, t, tb, "-n", "kube-system", "delete", "daemonset", "dns")
	time.Sleep(10 * time.Second)
	for _, n := range nodes {
		checkNameserver(ctx, t, tb, nodes, "client-"+n.Name, n.IP.String())
		p := nodednsPod(ctx, t, tb, n.Name)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if cs.RestartCount > 0 {
				t.Errorf("%s: nodedns container %s restarted %d times", n.Name, cs.Name, cs.RestartCount)
			}
		}
	}
	steps.end()
}

// dnsmasqPatch is docs/migration.md's patch of the old DaemonSet, step 1.
// The update strategy OnDelete keeps the patched template from rolling
// the old pods (a restart of each node's dnsmasq); the DaemonSet controller
// still deletes the pod of a node the new affinity excludes.
const dnsmasqPatch = `
     {"spec":{"updateStrategy":{"type":"OnDelete"},
       "template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":
       {"nodeSelectorTerms":[{"matchExpressions":[{"key":"nodedns.io/enabled","operator":"DoesNotExist"}]}]}}}}}}}`

// watchSwitch labels node for nodedns and follows, every 100 ms, the old
// dns pod's end and the nodedns pod's start until the nodedns pod is ready
// and the old pod gone; it returns the timeline, and fails t if a nodedns
// container restarted on the way (its states and logs then say why).
func watchSwitch(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *testbed.RealNode) string {
	t.Helper()
	c := tb.Client()
	at := time.Now()
	kubectl(ctx, t, tb, "label", "node", n.Name, "nodedns.io/enabled=true")
	var events []string
	seen := map[string]bool{}
	note := func(key, what string) {
		if !seen[key] {
			seen[key] = true
			events = append(events, fmt.Sprintf("%s %s", time.Since(at).Round(100*time.Millisecond), what))
		}
	}
	restarts := int32(0)
	err := waitUntilEvery(ctx, 100*time.Millisecond, func() bool {
		old, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=dns", FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return false
		}
		oldGone := len(old.Items) == 0
		for _, p := range old.Items {
			if p.DeletionTimestamp != nil {
				note("old-deleting", "old dns pod terminating")
			}
		}
		if oldGone {
			note("old-gone", "old dns pod gone")
		}
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector, FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil || len(pods.Items) == 0 {
			return false
		}
		p := &pods.Items[0]
		note("created", "nodedns pod created")
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if cs.State.Running != nil {
				note(cs.Name+"-running", cs.Name+" running")
			}
			if cs.Ready {
				note(cs.Name+"-ready", cs.Name+" ready")
			}
			if cs.RestartCount > restarts {
				restarts = cs.RestartCount
				why := ""
				if x := cs.LastTerminationState.Terminated; x != nil {
					why = fmt.Sprintf(" (exit %d %s: %s)", x.ExitCode, x.Reason, strings.TrimSpace(x.Message))
				}
				note(fmt.Sprintf("%s-restart-%d", cs.Name, cs.RestartCount), fmt.Sprintf("%s restarted (%d)%s", cs.Name, cs.RestartCount, why))
			}
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				note(cs.Name+"-wait-"+w.Reason, cs.Name+" waiting: "+w.Reason)
			}
		}
		return oldGone && podReady(p)
	})
	if err != nil {
		t.Fatalf("%s: switch to nodedns: %v\n%s\n%s", n.Name, err, strings.Join(events, "\n"), podStates(ctx, tb))
	}
	if restarts > 0 {
		t.Errorf("%s: a nodedns container restarted during the switch:\n%s\n%s", n.Name, strings.Join(events, "\n"), n.ContainerLogs("kube-system", "nodedns-", 4000))
	}
	return n.Name + " switched: " + strings.Join(events, ", ")
}

// deployDnsmasqDaemonSet creates a Zalando-style node DNS in kube-system:
// DaemonSet "dns" (hostNetwork) whose pod runs dnsmasq on the node IP's
// port 53 (bind-interfaces, listen-address = status.hostIP, forwarding
// everything to 127.0.0.1#5300) and CoreDNS on 127.0.0.1:5300 with the
// kubernetes plugin (the backend image stands in for stock CoreDNS, as in
// DeployCoreDNS), with its ServiceAccount and RBAC.
// preStopSleep > 0 gives dnsmasq a preStop hook that sleeps that long: the
// old pod keeps port 53 that much longer after its deletion.
func deployDnsmasqDaemonSet(ctx context.Context, t *testing.T, tb *testbed.Testbed, coreDNSImage string, preStopSleep int) {
	t.Helper()
	c := tb.Client()
	ns := "kube-system"
	labels := map[string]string{"app": "dns"}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "dns"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "dns", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Data:       map[string]string{"Corefile": zalandoCorefile},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:        true,
					DNSPolicy:          corev1.DNSDefault,
					ServiceAccountName: "dns",
					PriorityClassName:  "system-node-critical",
					Containers: []corev1.Container{
						{
							Name:            "dnsmasq",
							Image:           testbed.DnsmasqImage,
							ImagePullPolicy: corev1.PullNever,
							Args: []string{
								"--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=", "--log-facility=-",
								"--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address=$(HOST_IP)",
								"--cache-size=10000", "--server=127.0.0.1#5300", "--user=root",
							},
							Env: []corev1.EnvVar{{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
						},
						{
							Name:            "coredns",
							Image:           coreDNSImage,
							ImagePullPolicy: corev1.PullNever,
							Args:            []string{"-conf", "/etc/coredns/Corefile"},
							VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/ready", Port: intstr.FromInt32(18181)}},
								PeriodSeconds: 2,
							},
						},
					},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "dns"},
					}}}},
				},
			},
		},
	}
	if preStopSleep > 0 {
		ds.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"sleep", fmt.Sprint(preStopSleep)}},
		}}
	}
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dnsPodNames lists the pods of the old DaemonSet "dns", sorted.
func dnsPodNames(ctx context.Context, t *testing.T, tb *testbed.Testbed) string {
	t.Helper()
	list, err := tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=dns"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}
