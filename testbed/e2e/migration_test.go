package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

const (
	externalName = "external.nodedns.test"
	externalIP   = "192.0.2.53" // TEST-NET-1: an answer, never a destination
	// clientRate is each client pod's lookups per second; two clients make
	// the 200/s.
	clientRate = 100
	// lookupTimeout: a lookup unanswered this long is lost (a stub
	// resolver's first retry comes at 5s).
	lookupTimeout = 5 * time.Second
	// oomFile is the frontend's NODEDNS_TEST_OOM_FILE, in the holder's
	// emptyDir (the chart's holder.dir): a file of the pod, so that a
	// trigger left behind dies with it.
	oomFile = "/run/nodedns-holder/oom-kill"
)

// TestMigrationFromKubeadmCoreDNS: the cluster as kubeadm leaves it (the
// CoreDNS Deployment, 2 replicas, kubeadm's Corefile, kube-dns at
// 10.96.0.10), then docs/migration.md's path in iptables mode — helm
// install beside kube-dns, the patch and adoption of kube-dns with helm
// upgrade, the CoreDNS Deployment scaled away and deleted — while a client
// pod on each node resolves a Service name through the search path, a
// headless Service, kubernetes.default and an external name at 100
// lookups/s. Goal: no failed and no lost lookup in any step.
func TestMigrationFromKubeadmCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	imgs := buildNodeImages(ctx, t, false)
	backend, frontend := imgs.backend, imgs.frontend
	tb, nodes, checks := kubeadmCluster(ctx, t, imgs)
	c := tb.Client()
	results := t.TempDir()
	for _, n := range nodes {
		startClient(ctx, t, tb, n.Name, results, checks)
	}
	steps := &stepLog{}
	defer report(t, nodes, results, steps)
	steps.begin("a. kubeadm's CoreDNS Deployment (2 replicas)", "kubectl -n kube-system get deploy coredns")
	time.Sleep(15 * time.Second)

	// b. helm install in iptables mode, as docs/migration.md says.
	kubectl, err := testbed.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, tb)
	chrt, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	podAnnotations := map[string]any{}
	values := func(createService bool) map[string]any {
		v := chartValues(frontend, "iptables", createService, podAnnotations)
		// Test-only: step d2 creates this file to get the frontend
		// OOM-killed (frontend/README.md, "ENVIRONMENT").
		v["frontend"] = map[string]any{"env": []any{map[string]any{"name": "NODEDNS_TEST_OOM_FILE", "value": oomFile}}}
		return v
	}
	steps.begin("b1. helm install nodedns --set service.create=false; rollout status", "helm install nodedns ./helm/nodedns -n kube-system -f nodedns-values.yaml --set service.create=false")
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	if _, err := install.RunWithContext(ctx, chrt, values(false)); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "nodedns", 2); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}
	t.Logf("kube-dns endpoints once nodedns is ready: %s", serviceEndpoints(ctx, t, tb, "kube-dns"))
	time.Sleep(10 * time.Second)

	steps.begin("b2. kubectl patch, annotate, label kube-dns; helm upgrade --set service.create=true", "docs/migration.md step 2")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("-n", "kube-system", "patch", "service", "kube-dns", "--type=json", "-p", `[
  {"op":"replace","path":"/spec/selector","value":{"app.kubernetes.io/name":"nodedns","app.kubernetes.io/instance":"nodedns"}},
  {"op":"replace","path":"/spec/ports","value":[
    {"name":"dns","port":53,"protocol":"UDP","targetPort":5301},
    {"name":"dns-tcp","port":53,"protocol":"TCP","targetPort":5301}]}]`)
	run("-n", "kube-system", "annotate", "service", "kube-dns", "meta.helm.sh/release-name=nodedns", "meta.helm.sh/release-namespace=kube-system")
	run("-n", "kube-system", "label", "service", "kube-dns", "app.kubernetes.io/managed-by=Helm")
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helm.DefaultNamespace
	if _, err := upgrade.RunWithContext(ctx, helm.DefaultRelease, chrt, values(true)); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	time.Sleep(10 * time.Second)

	steps.begin("b3. kubectl scale deployment coredns --replicas=0, then delete CoreDNS's objects", "docs/migration.md step 3")
	run("-n", "kube-system", "scale", "deployment", "coredns", "--replicas=0")
	if err := testbed.WaitDeploymentReady(ctx, c, "kube-system", "coredns"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	run("-n", "kube-system", "delete", "deployment", "coredns")
	run("-n", "kube-system", "delete", "configmap", "coredns")
	run("-n", "kube-system", "delete", "serviceaccount", "coredns")
	run("delete", "clusterrolebinding", "system:coredns")
	run("delete", "clusterrole", "system:coredns")
	time.Sleep(10 * time.Second)

	// c. An upgrade that changes the pod template: a surge rollout.
	steps.begin("c. helm upgrade changing the pod template (surge rollout)", "helm upgrade nodedns ./helm/nodedns -n kube-system -f nodedns-values.yaml --set service.create=true --set podAnnotations.rollout=2")
	podAnnotations["nodedns.test/rollout"] = "2"
	upgrade = action.NewUpgrade(cfg)
	upgrade.Namespace = helm.DefaultNamespace
	start := time.Now()
	if _, err := upgrade.RunWithContext(ctx, helm.DefaultRelease, chrt, values(true)); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	waitRolledOut(ctx, t, tb, "nodedns", len(nodes))
	t.Logf("c: rolled out on both nodes in %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// d. The frontend's process killed: SIGKILLed, then, once it runs
	// again, OOM-killed by its memory limit (kubelet's back-off on the
	// second crash in a row).
	nodeA := nodes[0]
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
	steps.begin("d2. frontend OOM-killed by its 64Mi limit (kubelet's 10 s back-off on a second crash)", "touch <holder emptyDir>/"+filepath.Base(oomFile)+" (node-a; NODEDNS_TEST_OOM_FILE)")
	steps.expectLoss("a second crash in a row: kubelet's CrashLoopBackOff (10 s) outlasts the clients' 5 s timeout: queries wait in the held sockets, and those older than 5 s when the frontend is back are lost; " +
		"that backlog reaches the restarted frontend's empty cache at once, past --max-inflight-per-source (250) of the client's misses: those are answered SERVFAIL " +
		"(nodedns_server_refused_total{reason=\"inflight_source\"}), and a stub resolver that had not given up yet moves on to its next search name and fails with NXDOMAIN")
	r2 := oomKill(ctx, t, tb, nodeA)
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
	run("-n", "kube-system", "delete", "pod", pod.Name, "--wait=false")
	if err := waitUntil(ctx, func() bool {
		p := nodednsPod(ctx, t, tb, nodeA.Name)
		return p.Name != pod.Name && podReady(p)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("f: new pod on node-a ready after %s", time.Since(at).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// g. Back to the CoreDNS Deployment, as docs/migration.md's "Rolling
	// back" says, then helm uninstall.
	steps.begin("g1. CoreDNS Deployment restored, kube-dns patched back to it", "migration.md Rolling back 1-2")
	if err := testbed.DeployCoreDNS(ctx, c, backend.Ref, 2); err != nil {
		t.Fatal(err)
	}
	if err := testbed.WaitDeploymentReady(ctx, c, "kube-system", "coredns"); err != nil {
		t.Fatal(err)
	}
	run("-n", "kube-system", "patch", "service", "kube-dns", "--type=json", "-p", `[
  {"op":"replace","path":"/spec/selector","value":{"k8s-app":"kube-dns"}},
  {"op":"replace","path":"/spec/ports","value":[
    {"name":"dns","port":53,"protocol":"UDP","targetPort":53},
    {"name":"dns-tcp","port":53,"protocol":"TCP","targetPort":53}]}]`)
	time.Sleep(10 * time.Second)
	steps.begin("g2. helm uninstall nodedns", "helm uninstall nodedns -n kube-system")
	if _, err := action.NewUninstall(cfg).Run(helm.DefaultRelease); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if err := waitUntil(ctx, func() bool {
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector})
		return err == nil && len(pods.Items) == 0
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); err != nil {
		t.Errorf("g: kube-dns after helm uninstall: %v", err)
	}
	for _, n := range nodes {
		if left := nodeLeftovers(ctx, n); left != "" {
			t.Errorf("g: %s after helm uninstall still has:\n%s", n.Name, left)
		}
	}
	time.Sleep(10 * time.Second)
	steps.end()
}

// report prints a row of the Real nodes table per step (and, for the
// crash steps, what the pods saw second by second), and fails t for any
// failed or lost lookup. It runs deferred, so that a step that stops the
// test still reports the steps before it.
func report(t *testing.T, nodes []*testbed.RealNode, results string, steps *stepLog) {
	if len(steps.steps) == 0 {
		return
	}
	steps.end()
	time.Sleep(lookupTimeout + 2*time.Second) // the last second's lookups end and are written
	secs := readResults(t, results)
	var total stats
	for _, s := range steps.steps {
		st := summarize(secs, s.from, s.to)
		total.add(st)
		t.Logf("| %s | %d | %d | %d | %d | %s | %.2f s | `%s` |", s.name, st.lookups, st.failed, st.lost, st.slow, st.gap(), float64(st.longestWait)/1000, s.command)
		if strings.HasPrefix(s.name, "d") || strings.HasPrefix(s.name, "e") || strings.HasPrefix(s.name, "f") || st.failed+st.lost > 0 {
			t.Logf("%s, second by second:\n%s", s.name, perSecond(secs, s.from, s.to))
		}
		if st.failed+st.lost > 0 && s.expectLoss != "" {
			t.Logf("%s: %d failed and %d lost of %d lookups, expected: %s", s.name, st.failed, st.lost, st.lookups, s.expectLoss)
		} else if st.failed+st.lost > 0 {
			t.Errorf("%s: %d failed and %d lost of %d lookups; seconds with failures: %s", s.name, st.failed, st.lost, st.lookups, st.badSeconds())
		}
	}
	if t.Failed() {
		for _, n := range nodes {
			t.Logf("%s%s", n.ContainerLogs("kube-system", "nodedns-", 60000), n.ContainerLogs("default", "client-", 3000))
		}
	}
	if total.lookups < int(float64(len(nodes)*clientRate)*steps.duration().Seconds()*0.8) {
		t.Errorf("only %d lookups in %s: the clients did not keep their rate", total.lookups, steps.duration().Round(time.Second))
	}
}

// startClient runs `podtool load` as pod client-<node> on node, writing to
// dir/client-<node>/load.log (a hostPath: the node's mount namespace sees
// the host's /tmp).
func startClient(ctx context.Context, t *testing.T, tb *testbed.Testbed, node, dir string, checks []string) {
	t.Helper()
	startGroupClient(ctx, t, tb, dir, "", "client-"+node, node, checks)
}

func helmConfig(t *testing.T, tb *testbed.Testbed) *action.Configuration {
	t.Helper()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &tb.Kubeconfig
	ns := helm.DefaultNamespace
	getter.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// podStates describes every pod of kube-system, for a failure message.
func podStates(ctx context.Context, tb *testbed.Testbed) string {
	pods, err := tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s on %s: %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  %s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := cs.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last exit %d %s: %s", x.ExitCode, x.Reason, x.Message)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// serviceEndpoints lists the ready addresses and ports of a kube-system
// Service's EndpointSlices.
func serviceEndpoints(ctx context.Context, t *testing.T, tb *testbed.Testbed, svc string) string {
	t.Helper()
	list, err := tb.Client().DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, es := range list.Items {
		var ports []string
		for _, p := range es.Ports {
			if p.Port != nil {
				ports = append(ports, fmt.Sprint(*p.Port))
			}
		}
		for _, e := range es.Endpoints {
			ready := e.Conditions.Ready != nil && *e.Conditions.Ready
			out = append(out, fmt.Sprintf("%s:%s(ready=%v)", strings.Join(e.Addresses, ","), strings.Join(ports, "/"), ready))
		}
	}
	return strings.Join(out, " ")
}

func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
