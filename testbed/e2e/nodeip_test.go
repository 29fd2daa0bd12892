package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/helm"
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
// helm install in node-ip mode limited to nodes labelled for it, the old
// DaemonSet kept off nodes labelled against it, the nodes switched one at
// a time (the nodedns pod started first, its frontend waiting for the
// port; then the old pod removed), helm upgrade without the selector, the
// old DaemonSet deleted. The guide expects a short gap per node switch,
// from dnsmasq's exit to the frontend's next bind (measured, and allowed
// there only).
func TestNodeIPFromDnsmasqDaemonSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	imgs := buildNodeImages(ctx, t, true)
	archives, backend, frontend := imgs.all, imgs.backend, imgs.frontend

	start := time.Now()
	tb, nodes := testbed.StartRealNodesForTestWith(t, []string{"node-a", "node-b"}, testbed.RealNodeOptions{Images: archives, ClusterDNSNodeIP: true})
	c := tb.Client()
	t.Logf("control plane and two nodes up in %s", time.Since(start).Round(time.Millisecond))
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}

	// a. The dnsmasq + CoreDNS DaemonSet, pods pointed at their node's IP.
	deployDnsmasqDaemonSet(ctx, t, tb, backend.Ref, 0)
	webIP := deployWeb(ctx, t, tb, 2)
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
	// The guide's step 2 leaves a node's DNS unanswered from dnsmasq's
	// exit to the frontend's next bind.
	switched := map[string]string{}
	defer reportGroups(t, nodes, results, steps, groups, func(step, group string) (string, int) {
		if strings.HasPrefix(step, switched[group]) && switched[group] != "" {
			// The frontend retries its bind every 100 ms: the lookups sent
			// in between, and those queued in dnsmasq's socket, go
			// unanswered. With one label for both (the nodedns pod
			// created as the old one was deleted), 148-228 were lost.
			return "docs/migration.md step 2: queries sent between dnsmasq's exit and the frontend's bind (at most 100 ms later)", 50
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
	values := func(selector bool) map[string]any {
		v := chartValues(frontend, "node-ip", false, nil)
		// No CoreDNS Deployment to give the DNS back to: the pre-delete
		// hook would refuse the uninstall at the end of the test.
		v["coreDNS"] = map[string]any{"allowUninstallWithoutDNS": true}
		if selector {
			v["nodeSelector"] = map[string]any{"nodedns.io/enabled": "true"}
		}
		return v
	}
	steps.begin("h1. helm install --set mode=node-ip --set nodeSelector.nodedns\\.io/enabled=true; kubectl patch daemonset dns (affinity nodedns.io/old-dns NotIn off, OnDelete)", "docs/migration.md dnsmasq step 1")
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

	// h2, h3. Step 2: nodes switched one at a time.
	for i, n := range nodes {
		name := fmt.Sprintf("h%d. kubectl label node %s nodedns.io/enabled=true; kubectl wait (frontend running); kubectl label node %s nodedns.io/old-dns=off", 2+i, n.Name, n.Name)
		switched[n.Name] = name[:3]
		steps.begin(name, "docs/migration.md dnsmasq step 2")
		t.Logf("h%d: %s", 2+i, switchNode(ctx, t, tb, n))
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
	steps.begin("h5. kubectl -n kube-system delete daemonset dns; the labels removed", "kubectl -n kube-system delete daemonset dns; kubectl label node --all nodedns.io/enabled- nodedns.io/old-dns-")
	kubectl(ctx, t, tb, "-n", "kube-system", "delete", "daemonset", "dns")
	kubectl(ctx, t, tb, "label", "node", "--all", "nodedns.io/enabled-", "nodedns.io/old-dns-")
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
// still deletes the pod of a node the new affinity excludes: one labelled
// nodedns.io/old-dns=off (step 2's second label).
const dnsmasqPatch = `
     {"spec":{"updateStrategy":{"type":"OnDelete"},
       "template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":
       {"nodeSelectorTerms":[{"matchExpressions":[{"key":"nodedns.io/old-dns","operator":"NotIn","values":["off"]}]}]}}}}}}}`

// Step 2's wait between the two labels, as docs/migration.md has it: the
// node's nodedns pod created, its backend's startup probe passed, and its
// frontend running (it starts only after that, and is then waiting for
// the node IP's port 53, which dnsmasq holds).
const (
	waitBackendStarted  = `jsonpath={.status.initContainerStatuses[?(@.name=="backend")].started}=true`
	waitFrontendRunning = `jsonpath={.status.containerStatuses[?(@.name=="frontend")].state.running}`
)

// switchNode runs docs/migration.md's step 2 for node n with kubectl as
// written (label it for nodedns, wait for the nodedns pod's frontend,
// label it off the old DaemonSet) while it follows, every 100 ms, the old
// dns pod's end and the nodedns pod's start until the nodedns pod is ready
// and the old pod gone. It returns the timeline, and fails t if a nodedns
// container restarted on the way (its states and logs then say why) or if
// the frontend did not start before dnsmasq let go of the port (it then
// did not wait for it: the order the guide relies on did not hold).
func switchNode(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *testbed.RealNode) string {
	t.Helper()
	c := tb.Client()
	at := time.Now()
	var mu sync.Mutex
	var events []string
	seen := map[string]bool{}
	note := func(key, what string) {
		mu.Lock()
		defer mu.Unlock()
		if !seen[key] {
			seen[key] = true
			events = append(events, fmt.Sprintf("%s %s", time.Since(at).Round(100*time.Millisecond), what))
		}
	}
	timeline := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(events, ", ")
	}
	var restarts atomic.Int32
	pollCtx, stopPoll := context.WithTimeout(ctx, 5*time.Minute)
	defer stopPoll()
	polled := make(chan error, 1)
	go func() {
		polled <- waitUntilEvery(pollCtx, 100*time.Millisecond, func() bool {
			old, err := c.CoreV1().Pods("kube-system").List(pollCtx, metav1.ListOptions{LabelSelector: "app=dns", FieldSelector: "spec.nodeName=" + n.Name})
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
			pods, err := c.CoreV1().Pods("kube-system").List(pollCtx, metav1.ListOptions{LabelSelector: nodednsSelector, FieldSelector: "spec.nodeName=" + n.Name})
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
				if cs.RestartCount > restarts.Load() {
					restarts.Store(cs.RestartCount)
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
	}()
	kubectl(ctx, t, tb, "label", "node", n.Name, "nodedns.io/enabled=true")
	note("label-1", "labelled nodedns.io/enabled=true")
	kubectl(ctx, t, tb, "-n", "kube-system", "wait", "pod", "-l", "app.kubernetes.io/instance=nodedns", "--field-selector", "spec.nodeName="+n.Name,
		"--for=create", "--for="+waitBackendStarted, "--for="+waitFrontendRunning, "--timeout=5m")
	note("waited", "kubectl wait returned")
	kubectl(ctx, t, tb, "label", "node", n.Name, "nodedns.io/old-dns=off")
	note("label-2", "labelled nodedns.io/old-dns=off")
	if err := <-polled; err != nil {
		t.Fatalf("%s: switch to nodedns: %v\n%s\n%s", n.Name, err, timeline(), podStates(ctx, tb))
	}
	if restarts.Load() > 0 {
		t.Errorf("%s: a nodedns container restarted during the switch:\n%s\n%s", n.Name, timeline(), n.ContainerLogs("kube-system", "nodedns-", 4000))
	}
	logs := n.ContainerLogs("kube-system", "nodedns-", 200000)
	if !strings.Contains(logs, "bound the address once its holder released it") {
		t.Errorf("%s: the frontend did not wait for the port (it started after dnsmasq's exit):\n%s\n%s", n.Name, timeline(),
			grepLines(logs, "in use", "bound the address", "serving"))
	}
	return n.Name + " switched: " + timeline() + "; frontend: " + grepLines(logs, "bound the address")
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
