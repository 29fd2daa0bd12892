package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

const linkLocalIP = "169.254.20.10"

// TestLinkLocalFromKubeadmCoreDNS: the cluster as kubeadm leaves it (the
// CoreDNS Deployment, 2 replicas, kube-dns at 10.96.0.10) with a client pod
// per node resolving, then nodedns in link-local mode as docs/modes.md
// says: helm install beside kube-dns (service.create=false), kubelet's
// clusterDNS changed to 169.254.20.10 on each node (kubelet restarted),
// new client pods (which get 169.254.20.10 while the first ones keep
// 10.96.0.10, still CoreDNS through kube-proxy), a surge upgrade, a
// frontend crash loop and a pod deletion on one node, and the way back:
// clusterDNS to 10.96.0.10 again, helm uninstall, the new clients
// recreated. Goal: no failed and no lost lookup, also for the clients
// that still name 169.254.20.10 once nodedns is gone (the release rules
// send it to kube-dns's ClusterIP).
func TestLinkLocalFromKubeadmCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	imgs := buildNodeImages(ctx, t, false)
	frontend := imgs.frontend
	tb, nodes, checks := kubeadmCluster(ctx, t, imgs)
	c := tb.Client()
	results := t.TempDir()
	for _, n := range nodes {
		startGroupClient(ctx, t, tb, results, "old", "client-"+n.Name, n.Name, checks)
	}
	startTrace(ctx, t, tb, nodes)
	steps := &stepLog{}
	uninstalled := false
	defer reportGroups(t, nodes, results, steps, []string{"old", "new", "renewed"}, func(step, group string) (string, int) {
		// Known loss, cause not established (docs/migration.md, "In
		// link-local and node-ip modes"): the old clients still name the
		// kube-dns ClusterIP and go through kube-proxy, whose endpoints
		// change when the hook scales CoreDNS away (b1), when pods are
		// replaced (c) and when the nodedns pods go (d2); measured 77 of
		// 3,369 (b1), 1 of 4,264 (c) and 140 of 4,710 (d2), each within
		// about 3 s. The limit keeps a larger loss a failure.
		if group == "old" && (strings.HasPrefix(step, "b1") || strings.HasPrefix(step, "c") || strings.HasPrefix(step, "d2")) {
			return "clients naming the kube-dns ClusterIP through kube-proxy while its endpoints change (known, cause open: docs/migration.md; d2 lost 167 and 489 of about 5,400 in two runs of 2026-12-07)", 1000
		}
		// A frontend killed five times: the queries each killed process
		// had read are lost (the holder never saw them), and a restarted
		// frontend, its cache empty, may answer part of the backlog that
		// queued in the sockets SERVFAIL past --max-inflight-per-source.
		// Two runs of 2026-12-07: 0 failed and 0 lost, then 15 failed (in
		// one second, at a restart) and 11 lost, of about 34,000.
		if group == "new" && strings.HasPrefix(step, "c2") {
			return "a crash loop: the queries each killed frontend had read, and a restarted frontend's backlog past its per-client share", 100
		}
		return "", 0
	})
	steps.begin("a. kubeadm's CoreDNS Deployment (2 replicas)", "kubectl -n kube-system get deploy coredns")
	for _, n := range nodes {
		checkNameserver(ctx, t, tb, nodes, "client-"+n.Name, testbed.DNSServiceIP)
	}
	time.Sleep(10 * time.Second)

	// b1. helm install in link-local mode, kube-dns left to CoreDNS.
	cfg := helmConfig(t, tb)
	chrt, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	podAnnotations := map[string]any{}
	values := chartValues(frontend, "link-local", false, podAnnotations)
	steps.begin("b1. helm install nodedns --set mode=link-local --set service.create=false; rollout status", "helm install nodedns ./helm/nodedns -n kube-system -f nodedns-values.yaml --set mode=link-local --set service.create=false")
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	if _, err := install.RunWithContext(ctx, chrt, values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	defer func() {
		if !uninstalled {
			_, _ = action.NewUninstall(cfg).Run(helm.DefaultRelease)
		}
	}()
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "nodedns", 2); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}
	for _, n := range nodes {
		out, err := n.Run(ctx, "ip", "-o", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), linkLocalIP+"/") {
			t.Errorf("%s: %s not on the node after install:\n%s", n.Name, linkLocalIP, out)
		}
		if strings.Contains(string(out), testbed.DNSServiceIP+"/") {
			t.Errorf("%s: link-local mode took the kube-dns ClusterIP:\n%s", n.Name, out)
		}
	}
	time.Sleep(10 * time.Second)

	// b2. kubelet's clusterDNS to the link-local address, node by node.
	steps.begin("b2. kubelet clusterDNS: [169.254.20.10] on each node, kubelet restarted", "edit clusterDNS in /var/lib/kubelet/config.yaml; systemctl restart kubelet (node by node)")
	for _, n := range nodes {
		at := time.Now()
		if err := n.SetClusterDNS(ctx, []string{linkLocalIP}); err != nil {
			t.Fatal(err)
		}
		t.Logf("b2: %s: kubelet restarted and Ready after %s", n.Name, time.Since(at).Round(100*time.Millisecond))
	}
	time.Sleep(10 * time.Second)

	// b3. Pods created from now on get the link-local address; the first
	// clients keep the ClusterIP (CoreDNS through kube-proxy).
	steps.begin("b3. new client pods (nameserver 169.254.20.10) beside the old ones (10.96.0.10)", "kubectl run ... (pods created after the kubelet change)")
	for _, n := range nodes {
		startGroupClient(ctx, t, tb, results, "new", "client-new-"+n.Name, n.Name, checks)
	}
	for _, n := range nodes {
		checkNameserver(ctx, t, tb, nodes, "client-"+n.Name, testbed.DNSServiceIP)
		checkNameserver(ctx, t, tb, nodes, "client-new-"+n.Name, linkLocalIP)
	}
	time.Sleep(15 * time.Second)

	// c. A surge rollout in the mode where a stopped frontend is an outage.
	steps.begin("c. helm upgrade changing the pod template (surge rollout, link-local)", "helm upgrade nodedns ./helm/nodedns -n kube-system -f nodedns-values.yaml --set mode=link-local --set service.create=false --set podAnnotations.rollout=2")
	podAnnotations["nodedns.test/rollout"] = "2"
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helm.DefaultNamespace
	start := time.Now()
	if _, err := upgrade.RunWithContext(ctx, helm.DefaultRelease, chrt, values); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	waitRolledOut(ctx, t, tb, "nodedns", len(nodes))
	t.Logf("c: rolled out on both nodes in %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// c2. A crash loop past the holder's 30 s: the frontend SIGKILLed
	// whenever kubelet has started it again, so that kubelet's back-off
	// grows (10 s, 20 s, 40 s). The holder relays the node's queries to
	// the fallback Service meanwhile (docs/architecture.md, "Fail open").
	nodeA := nodes[0]
	steps.begin("c2. frontend crash loop on node-a for 90 s (SIGKILLed whenever it runs; kubelet's back-off 10 s, 20 s, 40 s)", "kill -KILL <frontend pid> each time kubelet has restarted it (node-a)")
	kills := 0
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		p, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector, FieldSelector: "spec.nodeName=" + nodeA.Name})
		if err != nil || len(p.Items) != 1 {
			continue
		}
		if cs, ok := containerStatus(&p.Items[0], "frontend"); ok && cs.State.Running != nil {
			if err := nodeA.KillContainer(ctx, cs.ContainerID); err == nil {
				kills++
			}
		}
	}
	t.Logf("c2: node-a frontend SIGKILLed %d times in 90 s", kills)
	if kills < 3 {
		t.Errorf("c2: only %d kills: no crash loop", kills)
	}
	start = time.Now()
	if err := waitUntil(ctx, func() bool { return podReady(nodednsPod(ctx, t, tb, nodeA.Name)) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("c2: node-a pod ready again %s after the last kill", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// c3. The pod deleted: its frontend stops with no successor on the
	// node and leaves 169.254.20.10 to the release rules (kube-dns's
	// ClusterIP through kube-proxy) until the new pod takes it back.
	steps.begin("c3. nodedns pod on node-a deleted (recreated by the DaemonSet controller)", "kubectl -n kube-system delete pod <nodedns pod on node-a>")
	old := nodednsPod(ctx, t, tb, nodeA.Name)
	start = time.Now()
	kubectl(ctx, t, tb, "-n", "kube-system", "delete", "pod", old.Name, "--wait=false")
	if err := waitUntil(ctx, func() bool {
		p := nodednsPod(ctx, t, tb, nodeA.Name)
		return p.Name != old.Name && podReady(p)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("c3: new pod on node-a ready after %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)

	// d. The way back: clusterDNS to the ClusterIP, then helm uninstall,
	// then the pods created meanwhile recreated.
	steps.begin("d1. kubelet clusterDNS back to [10.96.0.10], kubelet restarted", "edit clusterDNS back; systemctl restart kubelet (node by node)")
	for _, n := range nodes {
		if err := n.SetClusterDNS(ctx, []string{testbed.DNSServiceIP}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second)
	steps.begin("d2. helm uninstall nodedns (pods created in b3 still name 169.254.20.10)", "helm uninstall nodedns -n kube-system")
	if _, err := action.NewUninstall(cfg).Run(helm.DefaultRelease); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	uninstalled = true
	if err := waitUntil(ctx, func() bool {
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector})
		return err == nil && len(pods.Items) == 0
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if left := nodeLeftovers(ctx, n); left != "" {
			t.Errorf("d2: %s after helm uninstall still has:\n%s", n.Name, left)
		}
	}
	time.Sleep(10 * time.Second)
	steps.begin("d3. the b3 pods deleted and created again (nameserver 10.96.0.10)", "kubectl delete pod ...; kubectl run ...")
	for _, n := range nodes {
		if err := c.CoreV1().Pods("default").Delete(ctx, "client-new-"+n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		startGroupClient(ctx, t, tb, results, "renewed", "client-renewed-"+n.Name, n.Name, checks)
		checkNameserver(ctx, t, tb, nodes, "client-renewed-"+n.Name, testbed.DNSServiceIP)
	}
	time.Sleep(10 * time.Second)
	steps.end()
}
