package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/images/release"
	"github.com/nodedns/nodedns/testbed"
)

// releaseVersion is the version the e2e tests release nodedns as: chart
// version, appVersion and image tag alike, as `make release VERSION=…`
// sets them.
const releaseVersion = "0.0.0-e2e"

// published is a release of the tree in a registry the test started: the
// user's path, `helm install oci://…/nodedns --version V`, with the nodes'
// containerd pulling the images through their hosts.toml mirror.
type published struct {
	reg      *testbed.Registry
	chartRef string // oci://<registry>/nodedns
	version  string
}

// publishRelease starts a registry, points every node's containerd at it
// and runs what `make release REGISTRY=<registry>/nodedns VERSION=…` runs:
// both multi-arch image indexes and the chart, pushed.
func publishRelease(ctx context.Context, t testing.TB, tb *testbed.Testbed, nodes []*testbed.RealNode) *published {
	t.Helper()
	start := time.Now()
	reg, err := tb.StartRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.AddRegistry(reg); err != nil {
			t.Fatal(err)
		}
	}
	root, err := images.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := images.ReadTree(ctx, root, releaseVersion)
	if err != nil {
		t.Fatal(err)
	}
	prefix := reg.Host + "/nodedns"
	res, err := release.Publish(ctx, tree, release.Options{Registry: prefix})
	if err != nil {
		t.Fatalf("make release REGISTRY=%s VERSION=%s: %v", prefix, releaseVersion, err)
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("make release REGISTRY=%s VERSION=%s (%s):\n%s", prefix, releaseVersion, time.Since(start).Round(time.Second), out.String())
	return &published{reg: reg, chartRef: "oci://" + prefix + "/" + release.ChartName, version: releaseVersion}
}

// chart pulls the chart as `helm install oci://… --version V` does, with
// Helm's registry client.
func (p *published) chart(t testing.TB) *chart.Chart {
	t.Helper()
	rc, err := release.NewRegistryClient(true)
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(p.chartRef, "oci://") + ":" + p.version
	res, err := rc.Pull(ref)
	if err != nil {
		t.Fatalf("helm pull %s --version %s: %v", p.chartRef, p.version, err)
	}
	c, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatalf("load chart %s: %v", ref, err)
	}
	if c.Metadata.Version != p.version || c.Metadata.AppVersion != p.version {
		t.Fatalf("chart %s: version %s, appVersion %s, want both %s", ref, c.Metadata.Version, c.Metadata.AppVersion, p.version)
	}
	return c
}

// pulledByNodes checks that the nodes' containerd fetched both images'
// manifests from the registry: pulled, not imported.
func (p *published) pulledByNodes(t testing.TB) {
	t.Helper()
	for _, name := range []string{images.FrontendName, images.BackendName} {
		found := false
		for _, r := range p.reg.Requests() {
			if r.FromNodes && r.Method == "GET" && r.Status == 200 && strings.Contains(r.Path, "/nodedns/"+name+"/manifests/") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no node pulled %s from the registry %s: its image came from elsewhere", name, p.reg.Host)
		}
	}
}

// diagnoseInPods runs the command NOTES.txt gives, `kubectl exec POD -c
// frontend -- nodedns-frontend diagnose --pid=1`, through each node's
// runtime (the testbed's API server does not reach kubelet's exec): the
// frontend's image has no shell, and the command must still find the
// running frontend's flags and report on the node.
func diagnoseInPods(ctx context.Context, t *testing.T, tb *testbed.Testbed, nodes []*testbed.RealNode) {
	t.Helper()
	for _, n := range nodes {
		pods, err := tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector, FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		id := ""
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == "frontend" && cs.State.Running != nil {
					id = cs.ContainerID
				}
			}
		}
		if id == "" {
			t.Errorf("%s: no running frontend container", n.Name)
			continue
		}
		out, err := n.ExecContainer(ctx, id, "nodedns-frontend", "diagnose", "--pid=1", "--timeout=1s")
		t.Logf("%s: nodedns-frontend diagnose --pid=1 (%v):\n%s", n.Name, err, out)
		// Exit 1 is a failed check, 2 a usage error (the running
		// frontend's flags not found). The chart mounts no kubelet
		// configuration unless frontend.kubeletConfig is set, so that
		// check alone may be SKIP; any other skip is a check lost.
		ok := strings.Contains(string(out), "all checks passed") ||
			strings.Contains(string(out), "no check failed; 1 not run: kubelet clusterDNS\n")
		if err != nil || !ok {
			t.Errorf("%s: nodedns-frontend diagnose --pid=1 in the frontend container: %v", n.Name, err)
		}
	}
}
