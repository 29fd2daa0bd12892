package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// The designs the specs run on, in the order a run takes them: kubeadm's
// CoreDNS Deployment first (the control, and the state the chart is
// installed onto), then nodedns in each mode (docs/modes.md).
const (
	DesignCoreDNS   = "coredns"
	DesignIPTables  = "iptables"
	DesignLinkLocal = "link-local"
	DesignNodeIP    = "node-ip"
)

// Designs are all designs, in run order.
var Designs = []string{DesignCoreDNS, DesignIPTables, DesignLinkLocal, DesignNodeIP}

// linkLocalIP is the chart's default local address in link-local mode.
const linkLocalIP = "169.254.20.10"

// Cluster is the testbed cluster the designs are set up on, one after the
// other: kube-dns and the CoreDNS Deployment exist from the start
// (testbed.DeployCoreDNS), as kubeadm leaves them.
type Cluster struct {
	TB       *testbed.Testbed
	Nodes    []*testbed.RealNode
	Frontend testbed.Archive // the nodedns-frontend image the chart runs
	Logf     func(format string, args ...any)

	helmCfg *action.Configuration
}

// Setup makes design the cluster's DNS and returns the function that
// undoes it, leaving the cluster as kubeadm left it (CoreDNS serving).
func (c *Cluster) Setup(ctx context.Context, design string) (undo func(context.Context) error, err error) {
	switch design {
	case DesignCoreDNS:
		return func(context.Context) error { return nil }, testbed.WaitDeploymentReady(ctx, c.TB.Client(), "kube-system", "coredns")
	case DesignIPTables:
		return c.installNodedns(ctx, "iptables", nil)
	case DesignLinkLocal:
		return c.installNodedns(ctx, "link-local", func(*testbed.RealNode) []string { return []string{linkLocalIP} })
	case DesignNodeIP:
		return c.installNodedns(ctx, "node-ip", func(n *testbed.RealNode) []string { return []string{n.IP.String()} })
	}
	return nil, fmt.Errorf("design %q: not one of %s", design, strings.Join(Designs, ", "))
}

// installNodedns runs `helm install nodedns -n kube-system --set mode=MODE`
// beside kube-dns (service.create=false: the chart serves behind kubeadm's
// Service, its hook scales CoreDNS to 0: keepReplicas 0, so that the specs
// see nodedns's answers only), waits for every node to be
// served and CoreDNS's pods to be gone, and then, when clusterDNS gives a
// node's new nameserver, sets kubelet's clusterDNS on each node as
// docs/modes.md says. Undo goes back in the reverse order.
func (c *Cluster) installNodedns(ctx context.Context, mode string, clusterDNS func(*testbed.RealNode) []string) (func(context.Context) error, error) {
	cfg, err := c.helmConfig()
	if err != nil {
		return nil, err
	}
	chrt, err := helm.Load()
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = helm.DefaultRelease, helm.DefaultNamespace
	in.Timeout = 5 * time.Minute
	start := time.Now()
	if _, err := in.RunWithContext(ctx, chrt, chartValues(c.Frontend, mode)); err != nil {
		return nil, fmt.Errorf("helm install --set mode=%s: %w", mode, err)
	}
	undo := func(ctx context.Context) error {
		if clusterDNS != nil {
			for _, n := range c.Nodes {
				if err := n.SetClusterDNS(ctx, []string{testbed.DNSServiceIP}); err != nil {
					return err
				}
			}
		}
		un := action.NewUninstall(cfg)
		un.Timeout = 5 * time.Minute
		if _, err := un.Run(helm.DefaultRelease); err != nil {
			return fmt.Errorf("helm uninstall: %w", err)
		}
		return c.waitPodsGone(ctx, "app.kubernetes.io/instance=nodedns")
	}
	k := c.TB.Client()
	if err := testbed.WaitDaemonSetReady(ctx, k, "kube-system", "nodedns", int32(len(c.Nodes))); err != nil {
		return undo, err
	}
	if err := c.waitPodsGone(ctx, "k8s-app=kube-dns,app.kubernetes.io/instance!=nodedns"); err != nil {
		return undo, err
	}
	if clusterDNS != nil {
		for _, n := range c.Nodes {
			if err := n.SetClusterDNS(ctx, clusterDNS(n)); err != nil {
				return undo, err
			}
		}
	}
	c.Logf("conformance: nodedns in %s mode serves every node %s after helm install", mode, time.Since(start).Round(100*time.Millisecond))
	return undo, nil
}

// waitPodsGone waits until no kube-system pod matches selector: the
// framework's start-up check wants every kube-system pod Ready, and a
// terminating one is not.
func (c *Cluster) waitPodsGone(ctx context.Context, selector string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		pods, err := c.TB.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			return fmt.Errorf("kube-system pods %q still there (%d): %w", selector, n, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (c *Cluster) helmConfig() (*action.Configuration, error) {
	if c.helmCfg != nil {
		return c.helmCfg, nil
	}
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &c.TB.Kubeconfig
	ns := helm.DefaultNamespace
	getter.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	c.helmCfg = cfg
	return cfg, nil
}

// chartValues are the runs' helm values: the mode, kubeadm's kube-dns kept
// (service.create=false), the fallback Service open to the pods' and
// nodes' networks, and the images built here (imported, never pulled).
func chartValues(frontend testbed.Archive, mode string) map[string]any {
	return map[string]any{
		"mode":     mode,
		"service":  map[string]any{"clusterIP": testbed.DNSServiceIP, "create": false},
		"fallback": map[string]any{"clusterIP": "10.96.0.11", "allowedNetworks": []any{testbed.PodSubnet, testbed.NodeSubnet}},
		// No autoscaler or reconciler here: the hook's watch for CoreDNS
		// coming back (30 s by default, TestHelmInstallReplacesCoreDNS
		// keeps it) only lengthens the run.
		// keepReplicas 0: no CoreDNS replica answers a share of kube-dns
		// beside the design under test.
		"coreDNS": map[string]any{"settleSeconds": 5, "keepReplicas": 0},
		"image": map[string]any{
			"frontend":   map[string]any{"repository": images.DefaultRegistry + "/" + images.FrontendName},
			"backend":    map[string]any{"repository": images.DefaultRegistry + "/" + images.BackendName},
			"tag":        frontend.Ref[strings.LastIndexByte(frontend.Ref, ':')+1:],
			"pullPolicy": "Never",
		},
	}
}
