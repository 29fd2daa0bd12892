package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/backend/handoff"
	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// The shape matrix: nodedns installed, upgraded and uninstalled, under
// client load, on the DNS each distribution deploys (shapes_manifests_test.go),
// one cluster of two real nodes for all of them: between shapes the DNS
// objects go and the next shape's come, kubelet's clusterDNS changing with
// them. Each shape asserts no failed or lost lookup (a shape's lossOK may
// explain lost ones: the netpol shapes'), what the handoff did
// (CoreDNS scaled down to the replicas kept, or left serving with the
// reason it gives), and,
// sampled every 200 ms throughout, that the DNS Service never had no
// ready CoreDNS endpoint while a node had no ready nodedns pod.

// shapesEnv selects the shapes by name, comma-separated; "all" runs every
// one. Unset, TestShapes runs defaultShapes: what `make test` can afford.
const shapesEnv = "NODEDNS_SHAPES"

// defaultShapes run in `make test`: k3s, the one whose objects differ most
// from kubeadm's while its run is short (no autoscaler to wait out).
var defaultShapes = []string{"k3s"}

// shapesSummaryEnv names a file TestShapes writes its summary line to
// (`make shapes` prints it last).
const shapesSummaryEnv = "NODEDNS_SHAPES_SUMMARY"

// cpaSourceEnv names a source tree of
// github.com/kubernetes-sigs/cluster-proportional-autoscaler (with its
// vendor directory) to build the real autoscaler from. The Go module proxy
// answers 403 "This module version is not available" for every version of
// that module, so it cannot be fetched by `go`; without a tree, the
// autoscaler Deployments run the pause image with the autoscaler's flags
// (detected as autoscalers alike) and scale nothing.
const cpaSourceEnv = "NODEDNS_CPA_SRC"

// outcome is what the handoff's hook leaves: CoreDNS scaled down to the
// shape's keep replicas, or serving beside nodedns with a reason
// containing reason.
type outcome struct {
	scaled bool
	reason string
}

// shape is one distribution's DNS and what the handoff must do with it.
type shape struct {
	name      string
	clusterIP string // the DNS Service's ClusterIP: kubelet's clusterDNS
	// deployment and service are the DNS Deployment and Service.
	deployment, service string
	// deploy creates the distribution's DNS objects.
	deploy func(ctx context.Context, t *testing.T, r *shapesRun)
	// values are the chart values the shape needs (the docs' per-platform
	// values), over the images'.
	values map[string]any
	// install is what helm install's hook does.
	install outcome
	// beforeUpgrade is the operator's step the install's reason asks
	// for, or nil; upgradeValues are merged into values for helm upgrade.
	beforeUpgrade func(ctx context.Context, t *testing.T, r *shapesRun)
	upgradeValues map[string]any
	upgrade       outcome
	// afterUpgrade runs once the upgrade is checked (a reconciler's
	// re-apply), or nil.
	afterUpgrade func(ctx context.Context, t *testing.T, r *shapesRun)
	// gitops: rendered without a cluster and applied with kubectl apply
	// --server-side, removed with kubectl delete (no hooks), as Argo CD
	// does, instead of helm install, upgrade and uninstall.
	gitops bool
	// covered is the node nodedns runs on when not all ("" all).
	covered string
	// keep is coreDNS.keepReplicas in values (the chart's 1 unless set):
	// the replicas a scaled outcome leaves.
	keep int32
	// dualStack: the shape needs a dual-stack cluster; TestShapes runs
	// such shapes on one of their own.
	dualStack bool
	// groups are the client groups deploy starts besides the shape's own
	// (named after it), reported apart.
	groups []string
	// afterInstall runs once the install is checked, atEnd once the
	// uninstall is; either may be nil.
	afterInstall, atEnd func(ctx context.Context, t *testing.T, r *shapesRun)
	// beforeUninstall runs once the upgrade's checks are done, or nil.
	beforeUninstall func(ctx context.Context, t *testing.T, r *shapesRun)
	// lossOK, when set, says which of a step's lost lookups the shape
	// explains (reportGroups' groupLoss), given the steps; nil: none.
	lossOK func(t *testing.T, r *shapesRun, steps *stepLog) groupLoss
}

func shapes() []shape {
	kubeadm := func(ctx context.Context, t *testing.T, r *shapesRun) {
		if err := testbed.DeployCoreDNS(ctx, r.tb.Client(), r.imgs.backend.Ref, 2); err != nil {
			t.Fatal(err)
		}
	}
	return []shape{{
		name: "kubeadm", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns",
		deploy:  kubeadm,
		install: outcome{scaled: true},
		upgrade: outcome{scaled: true},
		keep:    1,
	}, {
		name: "k3s", clusterIP: "10.43.0.10", deployment: "coredns", service: "kube-dns",
		deploy: func(ctx context.Context, t *testing.T, r *shapesRun) {
			r.applyAs(ctx, t, "deploy", r.manifest(k3sManifest, nil))
		},
		// k3s's manifest sets no replicas: at the 1 the chart keeps by
		// default, CoreDNS is left as it is (handoff's unit tests). With
		// keepReplicas 0 the reconciler is what stops the handoff: k3s's
		// deploy controller re-applies its manifest, so CoreDNS stays
		// until the operator says the manifest leaves replicas alone.
		values:        map[string]any{"coreDNS": map[string]any{"keepReplicas": 0}},
		keep:          0,
		install:       outcome{reason: "objectset.rio.cattle.io"},
		upgradeValues: map[string]any{"coreDNS": map[string]any{"keepReplicas": 0, "overrideReconciler": true}},
		upgrade:       outcome{scaled: true},
		// A k3s restart: the deploy controller applies the manifest again
		// (server-side, its field manager "deploy", forced); it sets no
		// replicas, so CoreDNS stays at 0.
		afterUpgrade: func(ctx context.Context, t *testing.T, r *shapesRun) {
			r.applyAs(ctx, t, "deploy", r.manifest(k3sManifest, nil))
			time.Sleep(10 * time.Second)
			if n := r.replicas(ctx, t, "coredns"); n != 0 {
				t.Errorf("after k3s re-applied its manifest, coredns has %d replicas, want 0", n)
			}
		},
	}, {
		name: "rke2", clusterIP: "10.43.0.10", deployment: "rke2-coredns-rke2-coredns", service: "rke2-coredns-rke2-coredns",
		deploy: func(ctx context.Context, t *testing.T, r *shapesRun) {
			r.applyAs(ctx, t, "helm-controller", r.manifest(rke2Manifest, &autoscaler{
				name: "rke2-coredns-rke2-coredns-autoscaler", target: "Deployment/rke2-coredns-rke2-coredns",
				params: `{"coresPerReplica":256,"nodesPerReplica":16,"preventSinglePointFailure":true,"min":0,"max":0,"includeUnschedulableNodes":false}`,
			}))
		},
		values: map[string]any{
			"coreDNS": map[string]any{"deployment": "rke2-coredns-rke2-coredns"},
			"service": map[string]any{"name": "rke2-coredns-rke2-coredns"},
		},
		// The autoscaler is found first; the selector's
		// app.kubernetes.io/* values could not match anyway.
		install: outcome{reason: "rke2-coredns-rke2-coredns-autoscaler autoscales it"},
		upgrade: outcome{reason: "rke2-coredns-rke2-coredns-autoscaler autoscales it"},
	}, {
		name: "kubespray", clusterIP: "10.233.0.3", deployment: "coredns", service: "coredns",
		deploy: func(ctx context.Context, t *testing.T, r *shapesRun) {
			r.applyAs(ctx, t, "kubectl-client-side-apply", r.manifest(kubesprayManifest, &autoscaler{
				name: "dns-autoscaler", target: "Deployment/coredns",
				params: `{"preventSinglePointFailure":true,"coresPerReplica":256,"nodesPerReplica":16,"min":2}`,
			}))
		},
		values:  map[string]any{"service": map[string]any{"name": "coredns"}},
		keep:    1,
		install: outcome{reason: "dns-autoscaler autoscales it"},
		// What the reason says to do: the autoscaler to 0, then helm
		// upgrade hands off.
		beforeUpgrade: func(ctx context.Context, t *testing.T, r *shapesRun) {
			kubectl(ctx, t, r.tb, "-n", "kube-system", "scale", "deployment", "dns-autoscaler", "--replicas=0")
			r.waitNoPods(ctx, t, "k8s-app=dns-autoscaler")
		},
		upgrade: outcome{scaled: true},
	}, {
		name: "gke", clusterIP: testbed.DNSServiceIP, deployment: "kube-dns", service: "kube-dns",
		deploy: func(ctx context.Context, t *testing.T, r *shapesRun) {
			m := r.manifest(gkeManifest, &autoscaler{
				name: "kube-dns-autoscaler", target: "deployment/kube-dns",
				params: `{"coresPerReplica":256,"nodesPerReplica":16,"preventSinglePointFailure":true,"includeUnschedulableNodes":true}`,
			})
			r.applyAs(ctx, t, "", m)
			r.reconcile(ctx, t, m)
		},
		// The manifest sets no replicas: without the real autoscaler
		// (NODEDNS_CPA_SRC) kube-dns runs 1, which the chart's default
		// keepReplicas (1) leaves as it is, with no reason. With
		// keepReplicas 0, as for k3s, the add-on manager's label is what
		// keeps it, whichever autoscaler runs.
		values:  map[string]any{"coreDNS": map[string]any{"deployment": "kube-dns", "keepReplicas": 0}},
		install: outcome{reason: "addonmanager.kubernetes.io/mode=Reconcile"},
		upgrade: outcome{reason: "addonmanager.kubernetes.io/mode=Reconcile"},
	}, {
		name: "partial", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns",
		deploy: kubeadm,
		// Tried on node-a first, as operators try a node cache on a
		// subset of their nodes.
		values:  map[string]any{"nodeSelector": map[string]any{"nodedns.test/cache": "on"}},
		covered: "node-a",
		install: outcome{reason: "runs no ready pod on 1 of 2 schedulable Linux nodes (node-b)"},
		upgrade: outcome{reason: "runs no ready pod on 1 of 2 schedulable Linux nodes (node-b)"},
	}, {
		name: "gitops", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns",
		deploy: kubeadm,
		gitops: true,
		// What docs/gitops.md says to set where the chart is rendered
		// without a cluster: no Service of the chart's, the ClusterIP
		// given, no handoff (its pre-delete hook would not run).
		values: map[string]any{
			"service": map[string]any{"create": false, "clusterIP": testbed.DNSServiceIP},
			"coreDNS": map[string]any{"deployment": ""},
		},
		install: outcome{reason: ""},
		upgrade: outcome{reason: ""},
	}, {
		// kubeadm's DNS, the clients' namespace under default-deny egress
		// and a real NetworkPolicy engine (shapes_netpol_test.go).
		name: "netpol", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns", keep: 1,
		deploy:       netpolDeploy,
		install:      outcome{scaled: true},
		upgrade:      outcome{scaled: true},
		afterInstall: netpolAfterInstall,
		atEnd:        netpolAtEnd,
		lossOK:       netpolLossOK,
	}, {
		// The netpol shape in link-local mode: kube-dns left to CoreDNS's
		// kept replica and the nodedns pods' fallback listeners (through
		// kube-proxy), clients naming 169.254.20.10 from the install to
		// the uninstall (shapes_netpol_test.go).
		name: "netpol-link-local", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns", keep: 1,
		deploy:          netpolDeploy,
		values:          map[string]any{"mode": "link-local"},
		groups:          []string{netpolLinkLocalGroup},
		install:         outcome{scaled: true},
		upgrade:         outcome{scaled: true},
		afterInstall:    netpolLinkLocalAfterInstall,
		beforeUninstall: netpolLinkLocalBeforeUninstall,
		atEnd:           netpolAtEnd,
		lossOK:          netpolLossOK,
	}, {
		// kubeadm's DNS on a dual-stack cluster: kube-dns PreferDualStack
		// with an IPv6 ClusterIP too, clients naming each (shapes_dualstack_test.go).
		name: "dual-stack", clusterIP: testbed.DNSServiceIP, deployment: "coredns", service: "kube-dns", keep: 1,
		dualStack: true,
		groups:    []string{dualStackV6Group},
		deploy: func(ctx context.Context, t *testing.T, r *shapesRun) {
			kubeadm(ctx, t, r)
			dualStackDeploy(ctx, t, r)
		},
		install:      outcome{scaled: true},
		upgrade:      outcome{scaled: true},
		afterInstall: dualStackSources,
		atEnd:        dualStackAtEnd,
	}}
}

// autoscaler is a cluster-proportional-autoscaler of a shape.
type autoscaler struct{ name, target, params string }

// shapesRun is the matrix's cluster.
type shapesRun struct {
	tb      *testbed.Testbed
	nodes   []*testbed.RealNode
	imgs    nodeImages
	cpa     string // the autoscaler's image, or "" (pause)
	results string
	checks  []string
	cfg     *action.Configuration
	dnsIP   string // kubelet's clusterDNS now
	// gitopsFile is the manifests the GitOps shape applied last.
	gitopsFile string
	// knpSyncs are the times the netpol shape's engine began a sync of
	// its rules, by node name (netpolAtEnd reads them from its log).
	knpSyncs map[string][]time.Time
	// knpDrops are the netpol shape's nodes' drop counters, per second.
	knpDrops *queueDrops
	// steps is the running shape's step log.
	steps *stepLog
}

// TestShapes runs the shape matrix (shapesEnv selects shapes); `make
// shapes` runs it alone.
func TestShapes(t *testing.T) {
	all := shapes()
	var names []string
	for _, s := range all {
		names = append(names, s.name)
	}
	sel := defaultShapes
	if v := strings.TrimSpace(os.Getenv(shapesEnv)); v == "all" {
		sel = names
	} else if v != "" {
		sel = strings.Split(v, ",")
	}
	var run []shape
	for _, n := range sel {
		i := slices.Index(names, strings.TrimSpace(n))
		if i < 0 {
			t.Fatalf("%s=%s: no shape %q (shapes: %s)", shapesEnv, os.Getenv(shapesEnv), n, strings.Join(names, ", "))
		}
		run = append(run, all[i])
	}
	if os.Getenv(shapesEnv) == "" {
		t.Logf("%s unset: running %s only (%s=all runs %s)", shapesEnv, strings.Join(sel, ", "), shapesEnv, strings.Join(names, ", "))
	}
	// The summary line, written however the matrix ends: a shape that
	// never ran (the cluster did not start) counts as not passed.
	status := map[string]string{}
	defer func() {
		passed := 0
		var results []string
		for _, s := range run {
			switch st := status[s.name]; st {
			case "passed":
				passed++
				results = append(results, s.name)
			case "":
				results = append(results, s.name+" NOT RUN")
			default:
				results = append(results, s.name+" "+st)
			}
		}
		line := fmt.Sprintf("shapes: %d passed of %d (%s)", passed, len(run), strings.Join(results, ", "))
		t.Log(line)
		if f := os.Getenv(shapesSummaryEnv); f != "" {
			if err := os.WriteFile(f, []byte(line+"\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	runOn := func(t *testing.T, shapes []shape, dualStack bool) {
		r := startShapes(ctx, t, shapes[0].clusterIP, dualStack)
		for _, s := range shapes {
			start := time.Now()
			if t.Run(s.name, func(t *testing.T) { r.run(ctx, t, s) }) {
				status[s.name] = "passed"
			} else {
				status[s.name] = "FAILED"
			}
			t.Logf("shape %s: %s in %s", s.name, status[s.name], time.Since(start).Round(time.Second))
		}
	}
	var single, dual []shape
	for _, s := range run {
		if s.dualStack {
			dual = append(dual, s)
		} else {
			single = append(single, s)
		}
	}
	switch {
	case len(dual) == 0:
		runOn(t, single, false)
	case len(single) == 0:
		runOn(t, dual, true)
	default:
		// A dual-stack cluster would change the other shapes' Services
		// (k3s's manifest names one ClusterIP with PreferDualStack, which
		// the API server then refuses to re-apply): each kind of shape
		// gets a cluster of its own, the second once the first is gone.
		t.Run("single-stack", func(t *testing.T) { runOn(t, single, false) })
		t.Run("dual-stack-cluster", func(t *testing.T) { runOn(t, dual, true) })
	}
}

// startShapes starts the matrix's cluster: two real nodes whose kubelets
// name dnsIP, the "web" Services, the stub upstream's external name; a
// dual-stack one when dualStack.
func startShapes(ctx context.Context, t *testing.T, dnsIP string, dualStack bool) *shapesRun {
	t.Helper()
	imgs := buildNodeImages(ctx, t, false)
	cpa := buildAutoscalerImage(ctx, t)
	archives := imgs.all
	if cpa.Ref != "" {
		archives = append(slices.Clone(archives), cpa)
	}
	start := time.Now()
	tb, nodes := testbed.StartRealNodesForTestWith(t, []string{"node-a", "node-b"}, testbed.RealNodeOptions{Images: archives, ClusterDNS: []string{dnsIP}, DualStack: dualStack})
	t.Logf("control plane and two nodes up in %s", time.Since(start).Round(time.Millisecond))
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}
	// The partial rollout's nodeSelector matches node-a only.
	kubectl(ctx, t, tb, "label", "node", "node-a", "nodedns.test/cache=on")
	webIP := deployWeb(ctx, t, tb, 2)
	results, err := os.MkdirTemp("", "nodedns-e2e-shapes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(results) })
	return &shapesRun{
		tb: tb, nodes: nodes, imgs: imgs, cpa: cpa.Ref, results: results, cfg: helmConfig(t, tb), dnsIP: dnsIP,
		checks: []string{"web=" + webIP, "web-headless=*", "kubernetes.default=" + testbed.KubernetesServiceIP, externalName + "=" + externalIP},
	}
}

// buildAutoscalerImage builds cluster-proportional-autoscaler from the
// tree cpaSourceEnv names into an image; without one it returns no image
// and says so.
func buildAutoscalerImage(ctx context.Context, t *testing.T) testbed.Archive {
	t.Helper()
	src := os.Getenv(cpaSourceEnv)
	if src == "" {
		t.Logf("%s unset: the autoscaler Deployments run the pause image with the autoscaler's flags (the Go module proxy serves no version of github.com/kubernetes-sigs/cluster-proportional-autoscaler)", cpaSourceEnv)
		return testbed.Archive{}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cluster-proportional-autoscaler")
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=vendor", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/cluster-proportional-autoscaler")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cluster-proportional-autoscaler in %s: %v\n%s", src, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	const ref, tag = "nodedns.test/cluster-proportional-autoscaler:v1", "v1"
	layer, err := images.FilesLayer([]images.File{{Path: "cluster-proportional-autoscaler", Data: data, Mode: 0o755}}, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Build(images.Spec{Layers: []v1.Layer{layer}, Entrypoint: []string{"/cluster-proportional-autoscaler"}, Created: time.Unix(1_700_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "cpa.oci.tar")
	if err := images.WriteArchive(p, img, ref, tag); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster-proportional-autoscaler built from %s", src)
	return testbed.Archive{Ref: ref, Path: p, Digest: d.String()}
}

// manifest fills a shape's manifest's placeholders.
func (r *shapesRun) manifest(m string, a *autoscaler) string {
	if a != nil {
		image, command := testbed.PauseImage, "/pause"
		if r.cpa != "" {
			image, command = r.cpa, "/cluster-proportional-autoscaler"
		}
		as := strings.NewReplacer("NAME", a.name, "TARGET", a.target, "PARAMS", a.params, "CPA", image, "COMMAND", command).Replace(autoscalerManifest)
		m = strings.Replace(m, "AUTOSCALER", as, 1)
	}
	return strings.ReplaceAll(m, "IMAGE", r.imgs.backend.Ref)
}

// applyAs applies manifest with kubectl: server-side as manager when
// manager is set, client-side (kubectl apply, as kubespray and the add-on
// manager run it) otherwise.
func (r *shapesRun) applyAs(ctx context.Context, t *testing.T, manager, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "-f", f}
	if manager != "" && manager != "kubectl-client-side-apply" {
		args = append(args, "--server-side", "--force-conflicts", "--field-manager="+manager)
	}
	kubectl(ctx, t, r.tb, args...)
}

// reconcile re-applies manifest every 10 s until the shape ends, as the
// add-on manager does (kubectl apply of the objects labelled Reconcile).
func (r *shapesRun) reconcile(ctx context.Context, t *testing.T, manifest string) {
	f := filepath.Join(t.TempDir(), "addons.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	applied := 0
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			if out, err := kubectlOutput(rctx, r.tb, "apply", "-f", f); err != nil && rctx.Err() == nil {
				t.Logf("add-on manager's apply: %v\n%s", err, out)
			} else if err == nil {
				applied++
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		t.Logf("the add-on manager applied its manifest %d times", applied)
	})
}

// replicas returns the Deployment's spec.replicas.
func (r *shapesRun) replicas(ctx context.Context, t *testing.T, name string) int32 {
	t.Helper()
	d, err := r.tb.Client().AppsV1().Deployments("kube-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func (r *shapesRun) waitNoPods(ctx context.Context, t *testing.T, selector string) {
	t.Helper()
	if err := waitUntil(ctx, func() bool {
		pods, err := r.tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(pods.Items) == 0
	}); err != nil {
		t.Fatalf("pods %s still there: %v", selector, err)
	}
}

// reset removes every DNS object a shape made in kube-system (its
// Deployments, Services, ConfigMaps) and waits until their pods are gone,
// and points the kubelets at dnsIP.
func (r *shapesRun) reset(ctx context.Context, t *testing.T, dnsIP string) {
	t.Helper()
	c := r.tb.Client()
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	deps, err := c.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		_ = c.AppsV1().Deployments("kube-system").Delete(ctx, d.Name, del)
	}
	svcs, err := c.CoreV1().Services("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		_ = c.CoreV1().Services("kube-system").Delete(ctx, s.Name, del)
	}
	cms, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if cm.Name != "kube-root-ca.crt" && cm.Name != "extension-apiserver-authentication" {
			_ = c.CoreV1().ConfigMaps("kube-system").Delete(ctx, cm.Name, del)
		}
	}
	if err := waitUntil(ctx, func() bool {
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	}); err != nil {
		t.Fatalf("kube-system's pods did not go: %v\n%s", err, podStates(ctx, r.tb))
	}
	if dnsIP != r.dnsIP {
		start := time.Now()
		for _, n := range r.nodes {
			if err := n.SetClusterDNS(ctx, []string{dnsIP}); err != nil {
				t.Fatal(err)
			}
		}
		r.dnsIP = dnsIP
		t.Logf("kubelets' clusterDNS now %s (%s)", dnsIP, time.Since(start).Round(100*time.Millisecond))
	}
}

// run runs one shape: its DNS, clients on both nodes, then nodedns
// installed, upgraded and uninstalled.
func (r *shapesRun) run(ctx context.Context, t *testing.T, s shape) {
	c := r.tb.Client()
	r.reset(ctx, t, s.clusterIP)
	s.deploy(ctx, t, r)
	if err := testbed.WaitDeploymentReady(ctx, c, "kube-system", s.deployment); err != nil {
		t.Fatalf("%v\n%s", err, podStates(ctx, r.tb))
	}
	for _, n := range r.nodes {
		startGroupClient(ctx, t, r.tb, r.results, s.name, "client-"+s.name+"-"+n.Name, n.Name, r.checks)
	}
	t.Cleanup(func() {
		kubectl(context.Background(), t, r.tb, "delete", "pods", "-l", "nodedns.test/client="+s.name, "--wait=false")
	})
	for _, n := range r.nodes {
		checkNameserver(ctx, t, r.tb, r.nodes, "client-"+s.name+"-"+n.Name, s.clusterIP)
	}
	steps := &stepLog{}
	r.steps = steps
	lossOK := groupLoss(func(string, string) (string, int) { return "", 0 })
	if s.lossOK != nil {
		lossOK = s.lossOK(t, r, steps)
	}
	defer reportGroups(t, r.nodes, r.results, steps, append([]string{s.name}, s.groups...), lossOK)
	w := watchDNS(ctx, t, r, s)
	defer w.stop(t)

	steps.begin("a. "+s.name+": its own DNS", "kubectl -n kube-system get deploy "+s.deployment)
	time.Sleep(10 * time.Second)

	// What the uninstall must give back: the replicas CoreDNS runs now
	// (its autoscaler's choice, where it has one).
	before := r.replicas(ctx, t, s.deployment)
	values := r.values(s, nil)
	steps.begin("b. install", r.how(s, "install"))
	start := time.Now()
	if s.gitops {
		r.gitopsApply(ctx, t, values)
	} else {
		in := action.NewInstall(r.cfg)
		in.ReleaseName, in.Namespace = helm.DefaultRelease, helm.DefaultNamespace
		in.Timeout = 5 * time.Minute
		if _, err := in.RunWithContext(ctx, r.chart(t), values); err != nil {
			t.Fatalf("helm install: %v\n%s", err, podStates(ctx, r.tb))
		}
	}
	nodes := len(r.nodes)
	if s.covered != "" {
		nodes = 1
	}
	waitRolledOut(ctx, t, r.tb, "nodedns", nodes)
	t.Logf("b: installed in %s", time.Since(start).Round(100*time.Millisecond))
	r.checkOutcome(ctx, t, s, "b", s.install)
	if s.afterInstall != nil {
		steps.begin("b2. the shape's checks after the install", "")
		s.afterInstall(ctx, t, r)
	}
	time.Sleep(10 * time.Second)

	if s.beforeUpgrade != nil {
		steps.begin("c0. the operator's step the install's reason names", "")
		s.beforeUpgrade(ctx, t, r)
	}
	values = r.values(s, s.upgradeValues)
	steps.begin("c. upgrade (pod template changed: a surge rollout)", r.how(s, "upgrade"))
	start = time.Now()
	if s.gitops {
		r.gitopsApply(ctx, t, values)
	} else {
		up := action.NewUpgrade(r.cfg)
		up.Namespace = helm.DefaultNamespace
		up.Timeout = 5 * time.Minute
		if _, err := up.RunWithContext(ctx, helm.DefaultRelease, r.chart(t), values); err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, podStates(ctx, r.tb))
		}
	}
	waitRolledOut(ctx, t, r.tb, "nodedns", nodes)
	t.Logf("c: upgraded in %s", time.Since(start).Round(100*time.Millisecond))
	r.checkOutcome(ctx, t, s, "c", s.upgrade)
	if s.afterUpgrade != nil {
		steps.begin("c2. the distribution re-applies its DNS", "")
		s.afterUpgrade(ctx, t, r)
	}
	time.Sleep(10 * time.Second)
	if s.beforeUninstall != nil {
		s.beforeUninstall(ctx, t, r)
	}

	steps.begin("d. uninstall", r.how(s, "uninstall"))
	start = time.Now()
	if s.gitops {
		kubectl(ctx, t, r.tb, "delete", "-f", r.gitopsFile, "--ignore-not-found")
	} else {
		un := action.NewUninstall(r.cfg)
		un.Timeout = 5 * time.Minute
		if _, err := un.Run(helm.DefaultRelease); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, podStates(ctx, r.tb))
		}
	}
	r.waitNoPods(ctx, t, nodednsSelector)
	t.Logf("d: uninstalled in %s", time.Since(start).Round(100*time.Millisecond))
	d, err := c.AppsV1().Deployments("kube-system").Get(ctx, s.deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.replicas(ctx, t, s.deployment); got != before || d.Status.AvailableReplicas != before || d.Annotations[handoff.ReplicasAnnotation] != "" {
		t.Errorf("d: %s after the uninstall: %d replicas, %d available, %s=%q; want %d, %d, none",
			s.deployment, got, d.Status.AvailableReplicas, handoff.ReplicasAnnotation, d.Annotations[handoff.ReplicasAnnotation], before, before)
	}
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, s.service, metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != s.clusterIP {
		t.Errorf("d: Service %s after the uninstall: %v", s.service, err)
	}
	for _, n := range r.nodes {
		left := nodeLeftovers(ctx, n)
		// nodeLeftovers knows kubeadm's ClusterIP only.
		if out, err := n.Run(ctx, "ip", "-o", "addr", "show"); err == nil && strings.Contains(string(out), " "+s.clusterIP+"/") {
			left += "\nthe DNS ClusterIP " + s.clusterIP + " is still an address of the node"
		}
		if left != "" {
			t.Errorf("d: %s still has:\n%s", n.Name, left)
		}
	}
	time.Sleep(10 * time.Second)
	if s.atEnd != nil {
		s.atEnd(ctx, t, r)
	}
	steps.end()
}

// how is the operator's command of a step, for the report's table.
func (r *shapesRun) how(s shape, step string) string {
	if s.gitops {
		switch step {
		case "install", "upgrade":
			return "helm template nodedns … | kubectl apply --server-side -f -"
		default:
			return "kubectl delete -f <the rendered manifests> (no hooks)"
		}
	}
	return "helm " + step + " nodedns -n kube-system"
}

// values are the shape's chart values over the images' (built here,
// never pulled), with extra merged in and a pod annotation that changes
// with every call (an upgrade rolls the pods).
func (r *shapesRun) values(s shape, extra map[string]any) map[string]any {
	tag := r.imgs.frontend.Ref[strings.LastIndexByte(r.imgs.frontend.Ref, ':')+1:]
	v := map[string]any{
		"image": map[string]any{
			"frontend":   map[string]any{"repository": images.DefaultRegistry + "/" + images.FrontendName},
			"backend":    map[string]any{"repository": images.DefaultRegistry + "/" + images.BackendName},
			"tag":        tag,
			"pullPolicy": "Never",
		},
		"podAnnotations": map[string]any{"nodedns.test/rollout": fmt.Sprint(time.Now().UnixNano())},
		// 15 s: past the autoscalers' 10 s poll.
		"coreDNS": map[string]any{"settleSeconds": 15},
	}
	mergeValues(v, s.values)
	mergeValues(v, extra)
	return v
}

// mergeValues merges src into dst, maps key by key.
func mergeValues(dst, src map[string]any) {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, sm)
				continue
			}
			cp := map[string]any{}
			mergeValues(cp, sm)
			dst[k] = cp
			continue
		}
		dst[k] = sv
	}
}

func (r *shapesRun) chart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := helm.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gitopsApply renders the chart as `helm template` does (no cluster:
// lookup finds nothing) and applies it server-side, as Argo CD does. The
// same rendering without the GitOps values is refused first, naming them:
// an Application with the defaults fails to sync before it changes anything.
func (r *shapesRun) gitopsApply(ctx context.Context, t *testing.T, values map[string]any) {
	t.Helper()
	_, err := helm.Render(r.values(shape{}, nil), helm.Options{})
	for _, want := range []string{"rendered without a cluster", "service.create=false", "service.clusterIP=", `coreDNS.deployment=""`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm template with the default values: %v, want a refusal naming %s", err, want)
		}
	}
	rend, err := helm.Render(values, helm.Options{})
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if len(rend.Hooks) != 0 {
		t.Errorf("helm template with the GitOps values renders %d hooks, want none", len(rend.Hooks))
	}
	y := rend.YAML()
	if strings.Contains(y, "\nkind: Service\nmetadata:\n  name: kube-dns\n") {
		t.Errorf("helm template with the GitOps values renders a kube-dns Service")
	}
	f := filepath.Join(r.results, "gitops.yaml")
	if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	r.gitopsFile = f
	kubectl(ctx, t, r.tb, "apply", "--server-side", "--field-manager=argocd-controller", "-f", f)
}

// checkOutcome checks what the handoff left: CoreDNS at the shape's keep
// replicas with its replicas recorded, or serving with the reason want
// names.
func (r *shapesRun) checkOutcome(ctx context.Context, t *testing.T, s shape, step string, want outcome) {
	t.Helper()
	d, err := r.tb.Client().AppsV1().Deployments("kube-system").Get(ctx, s.deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := r.replicas(ctx, t, s.deployment)
	why := d.Annotations[handoff.StatusAnnotation]
	t.Logf("%s: %s has %d replicas; %s=%q", step, s.deployment, got, handoff.StatusAnnotation, why)
	switch {
	case want.scaled && (got != s.keep || d.Annotations[handoff.ReplicasAnnotation] == ""):
		t.Errorf("%s: %s has %d replicas, %s=%q; want %d (coreDNS.keepReplicas), recorded", step, s.deployment, got, handoff.ReplicasAnnotation, d.Annotations[handoff.ReplicasAnnotation], s.keep)
	case !want.scaled && got == 0:
		t.Errorf("%s: %s scaled to 0, want it serving beside nodedns", step, s.deployment)
	case !want.scaled && !strings.Contains(why, want.reason):
		t.Errorf("%s: %s=%q, want a reason naming %q", step, handoff.StatusAnnotation, why, want.reason)
	}
}

// dnsWatch samples the shape's DNS every 200 ms: whether the Service has a
// ready CoreDNS endpoint, and which nodes have a ready nodedns pod.
type dnsWatch struct {
	cancel     context.CancelFunc
	done       chan struct{}
	mu         sync.Mutex
	samples    int
	violations []string
	minCoreDNS int
}

// watchDNS starts sampling.
func watchDNS(ctx context.Context, t *testing.T, r *shapesRun, s shape) *dnsWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &dnsWatch{cancel: cancel, done: make(chan struct{}), minCoreDNS: -1}
	c := r.tb.Client()
	go func() {
		defer close(w.done)
		_ = waitUntilEvery(wctx, 200*time.Millisecond, func() bool {
			pods, err := c.CoreV1().Pods("kube-system").List(wctx, metav1.ListOptions{LabelSelector: nodednsSelector})
			if err != nil {
				return wctx.Err() != nil
			}
			served := map[string]bool{}
			for i := range pods.Items {
				if p := &pods.Items[i]; podReady(p) && p.DeletionTimestamp == nil {
					served[p.Spec.NodeName] = true
				}
			}
			eps, err := c.DiscoveryV1().EndpointSlices("kube-system").List(wctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + s.service})
			if err != nil {
				return wctx.Err() != nil
			}
			core := 0
			for _, es := range eps.Items {
				for _, e := range es.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready && e.TargetRef != nil && !strings.HasPrefix(e.TargetRef.Name, "nodedns-") {
						core++
					}
				}
			}
			var bare []string
			for _, n := range r.nodes {
				if !served[n.Name] {
					bare = append(bare, n.Name)
				}
			}
			w.mu.Lock()
			w.samples++
			if w.minCoreDNS < 0 || core < w.minCoreDNS {
				w.minCoreDNS = core
			}
			if core == 0 && len(bare) > 0 && len(w.violations) < 10 {
				w.violations = append(w.violations, fmt.Sprintf("%s: no ready CoreDNS endpoint of %s, no ready nodedns pod on %s", time.Now().UTC().Format("15:04:05.0"), s.service, strings.Join(bare, ", ")))
			}
			w.mu.Unlock()
			return false
		})
	}()
	return w
}

// stop ends the sampling and fails t for any moment with neither.
func (w *dnsWatch) stop(t *testing.T) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("DNS sampled %d times: fewest ready CoreDNS endpoints %d", w.samples, w.minCoreDNS)
	if len(w.violations) > 0 {
		t.Errorf("CoreDNS at 0 while a node had no ready nodedns pod:\n%s", strings.Join(w.violations, "\n"))
	}
	if w.samples < 10 {
		t.Errorf("only %d samples of the DNS", w.samples)
	}
}
