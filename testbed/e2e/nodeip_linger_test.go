package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// lingerSeconds is how long the old pod's dnsmasq keeps serving port 53
// after its pod is deleted (a preStop sleep): longer than the nodedns
// pod takes to start its frontend.
const lingerSeconds = 6

// TestNodeIPSwitchWhileDnsmasqLingers: docs/migration.md's dnsmasq step 2
// on one node whose old DNS pod takes lingerSeconds to let go of the node
// IP's port 53 (dnsmasq with a preStop sleep: it answers until then). The
// nodedns frontend starts before that and finds the port in use; it must
// wait for it (--bind-retry) rather than exit, or kubelet's back-off
// leaves the node without DNS after dnsmasq has gone.
func TestNodeIPSwitchWhileDnsmasqLingers(t *testing.T) {
	if r := testbed.RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if r := testbed.DnsmasqUnavailable(); r != "" {
		t.Skip("dnsmasq image: " + r)
	}
	if err := testbed.RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
	tb, nodes := testbed.StartRealNodesForTestWith(t, []string{"node-a"}, testbed.RealNodeOptions{Images: archives, ClusterDNSNodeIP: true})
	c := tb.Client()
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}
	deployDnsmasqDaemonSet(ctx, t, tb, backend.Ref, lingerSeconds)
	webIP := deployWebOn(ctx, t, tb, 1)
	if err := testbed.WaitDaemonSetReady(ctx, c, "kube-system", "dns", 1); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, tb))
	}
	results := t.TempDir()
	n := nodes[0]
	startGroupClient(ctx, t, tb, results, n.Name, "client-"+n.Name, n.Name, []string{
		"web=" + webIP, "web-headless=*", "kubernetes.default=" + testbed.KubernetesServiceIP, externalName + "=" + externalIP,
	})
	cfg := helmConfig(t, tb)
	steps := &stepLog{}
	installed := false
	defer func() {
		if installed {
			_, _ = action.NewUninstall(cfg).Run(helm.DefaultRelease)
		}
	}()
	defer reportGroups(t, nodes, results, steps, []string{n.Name}, func(step, _ string) (string, int) {
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
	chrt, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	if _, err := install.RunWithContext(ctx, chrt, map[string]any{
		"mode":         "node-ip",
		"nodeSelector": map[string]any{"nodedns.io/enabled": "true"},
		"service":      map[string]any{"create": false},
		"fallback":     map[string]any{"clusterIP": "10.96.0.11", "allowedNetworks": []any{testbed.PodSubnet, testbed.NodeSubnet}},
		"image": map[string]any{
			"frontend":   map[string]any{"repository": images.DefaultRegistry + "/" + images.FrontendName},
			"backend":    map[string]any{"repository": images.DefaultRegistry + "/" + images.BackendName},
			"tag":        frontend.Ref[strings.LastIndexByte(frontend.Ref, ':')+1:],
			"pullPolicy": "Never",
		},
	}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	installed = true
	kubectl(ctx, t, tb, "-n", "kube-system", "patch", "daemonset", "dns", "--type=merge", "-p", dnsmasqPatch)
	time.Sleep(10 * time.Second)

	steps.begin("i2. kubectl label node node-a nodedns.io/enabled=true (old dnsmasq lingers 6 s)", "docs/migration.md dnsmasq step 2, old pod with a 6 s preStop")
	t.Logf("i2: %s", watchSwitch(ctx, t, tb, n))
	time.Sleep(10 * time.Second)
	p := nodednsPod(ctx, t, tb, n.Name)
	if cs, ok := containerStatus(p, "frontend"); !ok || cs.RestartCount > 0 {
		t.Errorf("frontend restarted %d times\n%s", cs.RestartCount, podStates(ctx, tb))
	}
	t.Logf("frontend log:\n%s", grepLines(n.ContainerLogs("kube-system", "nodedns-", 200000), "in use", "bound the address", "serving"))
	steps.end()
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
