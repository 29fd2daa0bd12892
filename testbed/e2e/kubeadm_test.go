package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/backend/handoff"
	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

// kubeadmRun is the shared cluster of the kubeadm path: two real nodes as
// kubeadm leaves them, a client pod per node resolving from the start to
// the end, and whether nodedns is installed now.
type kubeadmRun struct {
	tb        *testbed.Testbed
	nodes     []*testbed.RealNode
	imgs      nodeImages
	rel       *published // nodedns released into a registry the test started
	results   string     // the clients' load.log files
	cfg       *action.Configuration
	installed bool
}

var kubeadmShared *kubeadmRun

// kubeadmPath returns the shared kubeadm-shaped cluster, starting it (and
// its clients) when no test has yet; with installed, nodedns is installed
// on it first when it is not.
func kubeadmPath(ctx context.Context, t *testing.T, installed bool) *kubeadmRun {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.tb == nil {
		imgs := buildNodeImages(ctx, t, false)
		s := &sharedTB{TB: t}
		s.use(t)
		shared.tb = s
		tb, nodes, checks := kubeadmCluster(ctx, s, imgs)
		results, err := os.MkdirTemp("", "nodedns-e2e-kubeadm-")
		if err != nil {
			t.Fatal(err)
		}
		s.Cleanup(func() { os.RemoveAll(results) })
		for _, n := range nodes {
			startClient(ctx, t, tb, n.Name, results, checks)
		}
		rel := publishRelease(ctx, s, tb, nodes)
		kubeadmShared = &kubeadmRun{tb: tb, nodes: nodes, imgs: imgs, rel: rel, results: results, cfg: helmConfig(t, tb)}
		// Clients resolve through CoreDNS for a while first.
		steps := &stepLog{}
		steps.begin("a. kubeadm's CoreDNS Deployment (2 replicas)", "kubectl -n kube-system get deploy coredns")
		time.Sleep(15 * time.Second)
		report(t, nodes, results, steps)
	} else {
		shared.tb.use(t)
	}
	if kubeadmShared == nil {
		t.Fatal("the shared kubeadm cluster failed to start in an earlier test")
	}
	r := kubeadmShared
	if installed && !r.installed {
		steps := &stepLog{}
		defer report(t, r.nodes, r.results, steps)
		r.install(ctx, t, steps)
	}
	return r
}

// nodednsChart is what the one-command install takes: the chart pulled
// from the test's registry (`helm install oci://…/nodedns --version V`)
// and no values; the nodes' containerd pulls its images from the same
// registry through their hosts.toml mirror.
func nodednsChart(t *testing.T, r *kubeadmRun) (*chart.Chart, map[string]any) {
	t.Helper()
	return r.rel.chart(t), map[string]any{}
}

// install runs `helm install nodedns <chart> -n kube-system` and checks
// what it promises: every node served by nodedns, kube-dns untouched and
// selecting pods that answer, CoreDNS scaled down to the one replica the
// chart keeps (coreDNS.keepReplicas).
func (r *kubeadmRun) install(ctx context.Context, t *testing.T, steps *stepLog) {
	t.Helper()
	c := r.tb.Client()
	chrt, values := nodednsChart(t, r)
	steps.begin("b. helm install nodedns (no values): nodedns on every node, CoreDNS scaled to the 1 kept by the post-install hook", "helm install nodedns oci://…/nodedns -n kube-system")
	// When was every node served: the DaemonSet rolled out, each pod
	// ready (the frontend is ready once it has taken the node's DNS over).
	served := make(chan time.Duration, 1)
	start := time.Now()
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = waitUntilEvery(wctx, 200*time.Millisecond, func() bool {
			ds, err := c.AppsV1().DaemonSets("kube-system").Get(wctx, "nodedns", metav1.GetOptions{})
			if err == nil && rolledOut(ds, int32(len(r.nodes))) {
				served <- time.Since(start)
				return true
			}
			return false
		})
	}()
	in := action.NewInstall(r.cfg)
	in.ReleaseName, in.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	in.Timeout = 5 * time.Minute // helm's default: the hook Job is waited for that long
	_, err := in.RunWithContext(ctx, chrt, values)
	took := time.Since(start)
	stopWatch()
	wg.Wait()
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, podStates(ctx, r.tb))
	}
	r.installed = true
	r.rel.pulledByNodes(t)
	diagnoseInPods(ctx, t, r.tb, r.nodes)
	select {
	case d := <-served:
		t.Logf("b: helm install returned after %s; every node served %s after it started", took.Round(100*time.Millisecond), d.Round(100*time.Millisecond))
	default:
		t.Errorf("b: helm install returned after %s before every node was served", took.Round(100*time.Millisecond))
	}
	for _, n := range r.nodes {
		out, err := n.Run(ctx, "ip", "-o", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), testbed.DNSServiceIP+"/") {
			t.Errorf("%s: the frontend does not hold the kube-dns ClusterIP:\n%s", n.Name, out)
		}
	}
	d, err := c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Annotations[handoff.ReplicasAnnotation] != "2" {
		t.Errorf("b: coredns has %d replicas, %s=%q; want 1 (coreDNS.keepReplicas) and 2", *d.Spec.Replicas, handoff.ReplicasAnnotation, d.Annotations[handoff.ReplicasAnnotation])
	}
	// kubeadm's shape passes every rule of the handoff: nothing says why
	// CoreDNS would stay.
	if why := d.Annotations[handoff.StatusAnnotation]; why != "" {
		t.Errorf("b: %s=%q, want none", handoff.StatusAnnotation, why)
	}
	checkKubeDNSService(ctx, t, r)
	time.Sleep(10 * time.Second)
}

// checkKubeDNSService: kubeadm's kube-dns is as kubeadm made it, and what
// the Kubernetes ecosystem expects of the cluster DNS finds nodedns: its
// endpoints are the nodes' IPs on 53 and 9153 and the one CoreDNS replica
// kept, the DNS debugging guide's `kubectl get pods -l k8s-app=kube-dns`
// lists the nodedns pods and that replica, `kubectl
// logs -l k8s-app=kube-dns` shows the frontend's log, and the metrics port
// a ServiceMonitor scrapes answers with the backend's metrics.
func checkKubeDNSService(ctx context.Context, t *testing.T, r *kubeadmRun) {
	t.Helper()
	svc, err := r.tb.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != testbed.DNSServiceIP || len(svc.Spec.Selector) != 1 || svc.Spec.Selector["k8s-app"] != "kube-dns" ||
		len(svc.Spec.Ports) != 3 || svc.Annotations["meta.helm.sh/release-name"] != "" {
		t.Errorf("kube-dns changed: %s %v %v %v", svc.Spec.ClusterIP, svc.Spec.Selector, svc.Spec.Ports, svc.Annotations)
	}
	// The CoreDNS pod scaled away takes its grace period to go; the
	// kept one stays.
	var kept string
	if err := waitUntil(ctx, func() bool {
		pods, err := r.tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) != len(r.nodes)+1 {
			return false
		}
		kept = ""
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "coredns-") && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
				kept = p.Status.PodIP
			}
		}
		return kept != ""
	}); err != nil {
		t.Errorf("not one CoreDNS pod left: %v\n%s", err, podStates(ctx, r.tb))
	}
	pods := kubectl(ctx, t, r.tb, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "name")
	if strings.Count(pods, "pod/nodedns-") != len(r.nodes) || strings.Count(pods, "pod/coredns-") != 1 {
		t.Errorf("kubectl get pods -l k8s-app=kube-dns:\n%s\nwant the %d nodedns pods and the one CoreDNS replica kept", pods, len(r.nodes))
	}
	want := []string{kept + ":53/53/9153(ready=true)"}
	for _, n := range r.nodes {
		want = append(want, n.IP.String()+":53/53/9153(ready=true)")
	}
	if err := waitUntil(ctx, func() bool {
		got := strings.Fields(serviceEndpoints(ctx, t, r.tb, "kube-dns"))
		return len(got) == len(want) && allIn(got, want)
	}); err != nil {
		t.Errorf("kube-dns endpoints %s, want the nodes' and the kept CoreDNS pod's %v", serviceEndpoints(ctx, t, r.tb, "kube-dns"), want)
	}
	// kubectl logs goes through the API server to each pod's kubelet,
	// which picks the container the pod names as its default.
	logs, err := kubectlOutput(ctx, r.tb, "-n", "kube-system", "logs", "-l", "k8s-app=kube-dns")
	switch {
	case err != nil && strings.Contains(logs, "could not find the requested resource ( pods/log"):
		// The testbed's kube-apiserver reaches no kubelet's log endpoint
		// (it has no kubelet client credentials): check what kubectl
		// would have shown, the log of each pod's default container.
		t.Logf("kubectl logs: %s; checking each pod's default container and kubelet's log of it instead", strings.TrimSpace(logs))
		list, err := r.tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, "nodedns-") {
				continue // the CoreDNS replica kept
			}
			if c := p.Annotations["kubectl.kubernetes.io/default-container"]; c != "frontend" {
				t.Errorf("%s: default container %q, want frontend", p.Name, c)
			}
		}
		for _, n := range r.nodes {
			files, _ := filepath.Glob(filepath.Join(n.Dir, "var", "log", "pods", "kube-system_nodedns-*", "frontend", "*.log"))
			var all []byte
			for _, f := range files {
				b, _ := os.ReadFile(f)
				all = append(all, b...)
			}
			if !strings.Contains(string(all), "169.254.20.10:53") {
				t.Errorf("%s: no frontend log naming 169.254.20.10:53 in %v", n.Name, files)
			}
		}
	case err != nil:
		t.Errorf("kubectl logs -l k8s-app=kube-dns: %v\n%s", err, logs)
	case !strings.Contains(logs, "169.254.20.10:53"):
		t.Errorf("kubectl logs -l k8s-app=kube-dns does not show the frontend's log:\n%s", logs)
	}
	// What kube-prometheus's ServiceMonitor scrapes: each endpoint's
	// metrics port (checked above: the nodes' IPs, 9153).
	for _, n := range r.nodes {
		out, err := n.Run(ctx, "curl", "-sf", "--max-time", "5", "http://"+n.IP.String()+":9153/metrics")
		if err != nil || !strings.Contains(string(out), "coredns_dns_requests_total") {
			t.Errorf("%s: http://%s:9153/metrics (kube-dns's metrics endpoint): %v\n%.1000s", n.Name, n.IP, err, out)
		}
	}
}

// kubectlOutput runs the built kubectl against tb and returns its output
// and error.
func kubectlOutput(ctx context.Context, tb *testbed.Testbed, args ...string) (string, error) {
	bin, err := testbed.Binary("kubectl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// allIn reports whether every endpoint in got is one of the nodes' IPs
// (want holds "IP:..." entries), ready, with the metrics port.
func allIn(got, want []string) bool {
	for _, g := range got {
		ok := false
		for _, w := range want {
			ip := strings.SplitN(w, ":", 2)[0]
			ok = ok || (strings.HasPrefix(g, ip+":") && strings.Contains(g, "9153") && strings.HasSuffix(g, "(ready=true)"))
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestHelmInstallReplacesCoreDNS: on a cluster as kubeadm leaves it, with
// a client pod per node resolving a Service name through the search path,
// a headless Service, kubernetes.default and an external name at 100
// lookups/s, one `helm install nodedns <chart> -n kube-system` with no
// values ends with every node's DNS served by nodedns, kube-dns at the
// same ClusterIP selecting pods that answer, and CoreDNS scaled down to
// the one replica kept (coreDNS.keepReplicas).
// Goal: no failed and no lost lookup.
func TestHelmInstallReplacesCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r := kubeadmPath(ctx, t, false)
	if r.installed {
		t.Fatal("nodedns is installed already on the shared cluster: run this test first")
	}
	steps := &stepLog{}
	defer report(t, r.nodes, r.results, steps)
	r.install(ctx, t, steps)
}

// TestMigrationFromKubeadmCoreDNS: on the kubeadm path's cluster, once
// nodedns is installed (TestHelmInstallReplacesCoreDNS), what a node's DNS
// meets in its life: a surge upgrade, the frontend SIGKILLed and then
// OOM-killed, the backend SIGKILLed, the pod deleted; the clients resolve
// throughout. Goal: no failed and no lost lookup, except where a step says
// why.
func TestMigrationFromKubeadmCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := kubeadmPath(ctx, t, true)
	tb := r.tb
	steps := &stepLog{}
	defer report(t, r.nodes, r.results, steps)
	chrt, values := nodednsChart(t, r)
	// A cache larger than the 64Mi limit holds: step d2 floods it with
	// large answers to get the frontend OOM-killed.
	values["cache"] = map[string]any{"size": floodCacheSize}
	values["podAnnotations"] = map[string]any{"nodedns.test/rollout": "2"}

	// c. An upgrade that changes the pod template: a surge rollout.
	steps.begin("c. helm upgrade changing the pod template (surge rollout)", "helm upgrade nodedns oci://…/nodedns -n kube-system --set podAnnotations.rollout=2 --set cache.size=200000")
	upgrade := action.NewUpgrade(r.cfg)
	upgrade.Namespace = helm.DefaultNamespace
	start := time.Now()
	if _, err := upgrade.RunWithContext(ctx, helm.DefaultRelease, chrt, values); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	waitRolledOut(ctx, t, tb, "nodedns", len(r.nodes))
	t.Logf("c: rolled out on both nodes in %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// d. The frontend's process killed: SIGKILLed, then, once it runs
	// again, OOM-killed by its memory limit (kubelet's back-off on the
	// second crash in a row).
	nodeA := r.nodes[0]
	steps.begin("d1. frontend SIGKILLed (kubelet restarts it at once)", "kill -KILL <frontend pid> (node-a)")
	pod := nodednsPod(ctx, t, tb, nodeA.Name)
	cs, _ := containerStatus(pod, "frontend")
	at := time.Now()
	if err := nodeA.KillContainer(ctx, cs.ContainerID); err != nil {
		t.Fatal(err)
	}
	r1 := waitRestarted(ctx, t, tb, pod, "frontend", cs.RestartCount, at)
	t.Logf("d1: node-a frontend after the SIGKILL: %s", r1)
	if r1.reason != "137 Error" {
		t.Errorf("d1: last exit %q, want 137 Error", r1.reason)
	}
	steps.begin("d2. frontend OOM-killed by its 64Mi limit, its cache (cache.size=200000) flooded with large answers (kubelet's 10 s back-off on a second crash)",
		fmt.Sprintf("dig @169.254.20.10 N.%s A, N = 0, 1, 2, … (node-a; %d A records each) until the frontend stops answering", floodZone, floodRecords))
	steps.expectLoss("a second crash in a row: kubelet's CrashLoopBackOff (10 s) outlasts the clients' 5 s timeout: queries wait in the held sockets, and those older than 5 s when the frontend is back are lost; " +
		"that backlog reaches the restarted frontend's empty cache at once, past --max-inflight-per-source (250) of the client's misses: those are answered SERVFAIL " +
		"(nodedns_server_refused_total{reason=\"inflight_source\"}), and a stub resolver that had not given up yet moves on to its next search name and fails with NXDOMAIN")
	r2 := oomKill(ctx, t, tb, nodeA, linkLocalIP)
	t.Logf("d2: node-a frontend after the OOM kill: %s", r2)
	if r2.reason != "137 OOMKilled" {
		t.Errorf("d2: last exit %q, want 137 OOMKilled", r2.reason)
	}
	time.Sleep(10 * time.Second)

	// e. The backend killed: misses go to the other node's backend.
	steps.begin("e. backend SIGKILLed (misses through the fallback)", "kill -KILL <backend pid> (node-a)")
	pod = nodednsPod(ctx, t, tb, nodeA.Name)
	bs, _ := containerStatus(pod, "backend")
	at = time.Now()
	if err := nodeA.KillContainer(ctx, bs.ContainerID); err != nil {
		t.Fatal(err)
	}
	t.Logf("e: node-a backend %s", waitRestarted(ctx, t, tb, pod, "backend", bs.RestartCount, at))
	time.Sleep(10 * time.Second)

	// f. The pod deleted: the DaemonSet controller makes a new one.
	steps.begin("f. nodedns pod deleted (recreated by the DaemonSet controller)", "kubectl -n kube-system delete pod <nodedns pod on node-a>")
	at = time.Now()
	kubectl(ctx, t, tb, "-n", "kube-system", "delete", "pod", pod.Name, "--wait=false")
	if err := waitUntil(ctx, func() bool {
		p := nodednsPod(ctx, t, tb, nodeA.Name)
		return p.Name != pod.Name && podReady(p)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("f: new pod on node-a ready after %s", time.Since(at).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	steps.end()
}

// TestSlowDomainFromHostNetwork: on the kubeadm path's cluster with
// nodedns installed, a hostNetwork pod floods names of a domain whose
// servers hang; a hostNetwork client and a pod client go on resolving
// new names (slowDomainFromHostNetwork).
func TestSlowDomainFromHostNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	slowDomainFromHostNetwork(ctx, t, kubeadmPath(ctx, t, true))
}

// TestHelmUninstallRestoresCoreDNS: then one `helm uninstall nodedns -n
// kube-system`: its pre-delete hook scales CoreDNS back and waits until it
// is available, and only then are the nodedns pods deleted, each frontend
// removing its rules and interface. Goal: no failed and no lost lookup,
// nothing left on the nodes, kube-dns as kubeadm made it.
func TestHelmUninstallRestoresCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r := kubeadmPath(ctx, t, true)
	// The last test of the kubeadm path: the cluster goes with it, after
	// the report (cleanups run after deferred calls).
	t.Cleanup(stopShared)
	c := r.tb.Client()
	steps := &stepLog{}
	defer report(t, r.nodes, r.results, steps)
	steps.begin("g. helm uninstall nodedns: CoreDNS back and available (pre-delete hook), then nodedns removed", "helm uninstall nodedns -n kube-system")
	// The order: CoreDNS available before the DaemonSet goes.
	order := make(chan string, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	go func() {
		_ = waitUntilEvery(wctx, 100*time.Millisecond, func() bool {
			ds, err := c.AppsV1().DaemonSets("kube-system").Get(wctx, "nodedns", metav1.GetOptions{})
			if err == nil && ds.DeletionTimestamp == nil {
				return false
			}
			d, derr := c.AppsV1().Deployments("kube-system").Get(wctx, "coredns", metav1.GetOptions{})
			if derr != nil {
				order <- "coredns: " + derr.Error()
			} else {
				order <- strings.Repeat("available ", int(d.Status.AvailableReplicas))
			}
			return true
		})
	}()
	start := time.Now()
	un := action.NewUninstall(r.cfg)
	un.Timeout = 5 * time.Minute
	if _, err := un.Run(helm.DefaultRelease); err != nil {
		stopWatch()
		t.Fatalf("helm uninstall: %v\n%s", err, podStates(ctx, r.tb))
	}
	r.installed = false
	t.Logf("g: helm uninstall returned after %s", time.Since(start).Round(100*time.Millisecond))
	select {
	case got := <-order:
		if strings.Count(got, "available") != 2 {
			t.Errorf("g: when the DaemonSet went, coredns had %q replicas available, want 2", got)
		}
	case <-time.After(time.Minute):
		t.Errorf("g: the DaemonSet was not deleted")
	}
	stopWatch()
	if err := waitUntil(ctx, func() bool {
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector})
		return err == nil && len(pods.Items) == 0
	}); err != nil {
		t.Fatal(err)
	}
	d, err := c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || d.Status.AvailableReplicas != 2 || d.Annotations[handoff.ReplicasAnnotation] != "" {
		t.Errorf("g: coredns %d replicas, %d available, annotation %q; want 2, 2, none", *d.Spec.Replicas, d.Status.AvailableReplicas, d.Annotations[handoff.ReplicasAnnotation])
	}
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != testbed.DNSServiceIP {
		t.Errorf("g: kube-dns after helm uninstall: %v %v", svc, err)
	}
	for _, n := range r.nodes {
		if left := nodeLeftovers(ctx, n); left != "" {
			t.Errorf("g: %s after helm uninstall still has:\n%s", n.Name, left)
		}
	}
	time.Sleep(10 * time.Second)
}
