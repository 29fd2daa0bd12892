package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

// lingerSeconds is how long the old pod's dnsmasq keeps serving port 53
// after its pod is deleted (a preStop sleep): longer than the nodedns
// pod takes to start its frontend.
const lingerSeconds = 6

// TestNodeIPSwitchWhileDnsmasqLingers: docs/migration.md's dnsmasq step 2
// on one node whose old DNS pod takes lingerSeconds to let go of the node
// IP's port 53 (dnsmasq with a preStop sleep: it answers until then). The
// nodedns frontend, started before the old pod is deleted, finds the port
// in use for lingerSeconds and more; it must wait for it (bind retry)
// rather than exit, or kubelet's back-off leaves the node without DNS
// after dnsmasq has gone.
func TestNodeIPSwitchWhileDnsmasqLingers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tb, n, results, install := startDnsmasqNode(ctx, t, lingerSeconds)
	steps := &stepLog{}
	defer reportGroups(t, []*testbed.RealNode{n}, results, steps, []string{n.Name}, func(step, _ string) (string, int) {
		if strings.HasPrefix(step, "i2") {
			// The old dnsmasq answers until it exits; the frontend binds
			// within BindRetryInterval (100 ms) of that: lookups sent in
			// between, and those queued in dnsmasq's socket, go unanswered.
			// Without the retry the frontend crash-looped and 800 of 2,881
			// were lost.
			return "queries sent between dnsmasq's exit and the frontend's bind (at most 100 ms later)", 50
		}
		return "", 0
	})

	steps.begin("i1. helm install (node-ip, nodeSelector); kubectl patch daemonset dns", "docs/migration.md dnsmasq step 1")
	install()
	time.Sleep(10 * time.Second)

	steps.begin("i2. docs/migration.md dnsmasq step 2 on node-a (old dnsmasq lingers 6 s)", "docs/migration.md dnsmasq step 2, old pod with a 6 s preStop")
	t.Logf("i2: %s", switchNode(ctx, t, tb, n))
	time.Sleep(10 * time.Second)
	p := nodednsPod(ctx, t, tb, n.Name)
	if cs, ok := containerStatus(p, "frontend"); !ok || cs.RestartCount > 0 {
		t.Errorf("frontend restarted %d times\n%s", cs.RestartCount, podStates(ctx, tb))
	}
	t.Logf("frontend log:\n%s", grepLines(n.ContainerLogs("kube-system", "nodedns-", 200000), "in use", "bound the address", "serving"))
	steps.end()
}

// TestNodeIPSwitchWithALateSecondLabel: docs/migration.md's dnsmasq step 2
// with its second label 25 s after the wait (the sequence interrupted, an
// operator's pause). The frontend keeps waiting for the port (the chart's
// frontend.bindTimeoutSeconds, 300 s, with a startup probe as long) while
// dnsmasq answers, and binds once the old pod is gone: nothing is lost
// but the queries between dnsmasq's exit and the bind, and the frontend
// is never restarted.
func TestNodeIPSwitchWithALateSecondLabel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tb, n, results, install := startDnsmasqNode(ctx, t, 0)
	steps := &stepLog{}
	defer reportGroups(t, []*testbed.RealNode{n}, results, steps, []string{n.Name}, func(step, _ string) (string, int) {
		if strings.HasPrefix(step, "j3") {
			return "queries sent between dnsmasq's exit and the frontend's bind (at most 100 ms later)", 50
		}
		return "", 0
	})
	steps.begin("j1. helm install (node-ip, nodeSelector); kubectl patch daemonset dns", "docs/migration.md dnsmasq step 1")
	install()
	time.Sleep(10 * time.Second)

	steps.begin("j2. kubectl label node node-a nodedns.io/enabled=true; kubectl wait (frontend running); 25 s without the second label", "docs/migration.md dnsmasq step 2, interrupted")
	kubectl(ctx, t, tb, "label", "node", n.Name, "nodedns.io/enabled=true")
	kubectl(ctx, t, tb, "-n", "kube-system", "wait", "pod", "-l", "app.kubernetes.io/instance=nodedns", "--field-selector", "spec.nodeName="+n.Name,
		"--for=create", "--for="+waitBackendStarted, "--for="+waitFrontendRunning, "--timeout=5m")
	time.Sleep(25 * time.Second)
	frontendRestarts := func() int32 {
		cs, _ := containerStatus(nodednsPod(ctx, t, tb, n.Name), "frontend")
		return cs.RestartCount
	}
	if r := frontendRestarts(); r != 0 {
		t.Errorf("j2: the frontend restarted %d times while it waited for the port:\n%s", r, podStates(ctx, tb))
	}

	steps.begin("j3. kubectl label node node-a nodedns.io/old-dns=off", "docs/migration.md dnsmasq step 2, resumed")
	at := time.Now()
	kubectl(ctx, t, tb, "label", "node", n.Name, "nodedns.io/old-dns=off")
	if err := waitUntil(ctx, func() bool {
		return strings.Contains(n.ContainerLogs("kube-system", "nodedns-", 200000), "bound the address once its holder released it")
	}); err != nil {
		t.Fatalf("j3: the frontend did not bind: %v\n%s", err, podStates(ctx, tb))
	}
	t.Logf("j3: bound %s after the second label, having waited %s in all; log:\n%s", time.Since(at).Round(100*time.Millisecond), (time.Since(at) + 25*time.Second).Round(time.Second),
		grepLines(n.ContainerLogs("kube-system", "nodedns-", 200000), "in use", "bound the address", "serving"))
	time.Sleep(10 * time.Second)
	if r := frontendRestarts(); r != 0 {
		t.Errorf("j3: the frontend restarted %d times", r)
	}
	steps.end()
}

// startDnsmasqNode starts a one-node testbed whose kubelet points pods at
// the node IP, where the dnsmasq + CoreDNS DaemonSet "dns" answers
// (dnsmasq with a preStop sleep of preStopSleep seconds if > 0), and a
// client pod resolving there into results. install is docs/migration.md's
// dnsmasq step 1: nodedns installed for labelled nodes, the old DaemonSet
// patched; it is uninstalled at the end of the test.
func startDnsmasqNode(ctx context.Context, t *testing.T, preStopSleep int) (tb *testbed.Testbed, n *testbed.RealNode, results string, install func()) {
	t.Helper()
	imgs := buildNodeImages(ctx, t, true)
	archives, backend, frontend := imgs.all, imgs.backend, imgs.frontend
	tb, nodes := testbed.StartRealNodesForTestWith(t, []string{"node-a"}, testbed.RealNodeOptions{Images: archives, ClusterDNSNodeIP: true})
	c := tb.Client()
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}
	deployDnsmasqDaemonSet(ctx, t, tb, backend.Ref, preStopSleep)
	webIP := deployWeb(ctx, t, tb, 1)
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "dns", 1); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}
	results = t.TempDir()
	n = nodes[0]
	startGroupClient(ctx, t, tb, results, n.Name, "client-"+n.Name, n.Name, []string{
		"web=" + webIP, "web-headless=*", "kubernetes.default=" + testbed.KubernetesServiceIP, externalName + "=" + externalIP,
	})
	cfg := helmConfig(t, tb)
	install = func() {
		t.Helper()
		chrt, err := helm.Load()
		if err != nil {
			t.Fatal(err)
		}
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace = helm.DefaultRelease, helm.DefaultNamespace
		values := chartValues(frontend, "node-ip", false, nil)
		values["nodeSelector"] = map[string]any{"nodedns.io/enabled": "true"}
		// No CoreDNS Deployment to give the DNS back to: the pre-delete
		// hook would refuse the test's final uninstall.
		values["coreDNS"] = map[string]any{"allowUninstallWithoutDNS": true}
		if _, err := in.RunWithContext(ctx, chrt, values); err != nil {
			t.Fatalf("helm install: %v", err)
		}
		// After the test's defers (the report), before the testbed's
		// own cleanup, registered earlier.
		t.Cleanup(func() { _, _ = action.NewUninstall(cfg).Run(helm.DefaultRelease) })
		kubectl(ctx, t, tb, "-n", "kube-system", "patch", "daemonset", "dns", "--type=merge", "-p", dnsmasqPatch)
	}
	return tb, n, results, install
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
