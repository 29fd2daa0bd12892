package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// Client groups: the tests that change kubelet's clusterDNS run clients
// created before and after the change, and report each group apart.
// Results go to <results>/<group>/<pod>/load.log, so that readResults of
// <results>/<group> sums one group.

// startGroupClient runs `podtool load` as pod name on node, in group.
func startGroupClient(ctx context.Context, t *testing.T, tb *testbed.Testbed, results, group, name, node string, checks []string) {
	t.Helper()
	startClientNaming(ctx, t, tb, results, group, name, node, "", checks)
}

// startClientNaming is startGroupClient for a pod whose resolv.conf names
// nameserver (dnsPolicy None, the search path and options kubelet would
// write) instead of kubelet's clusterDNS; "" keeps kubelet's.
func startClientNaming(ctx context.Context, t *testing.T, tb *testbed.Testbed, results, group, name, node, nameserver string, checks []string) {
	t.Helper()
	hostDir := filepath.Join(results, group, name)
	if err := os.MkdirAll(hostDir, 0o777); err != nil {
		t.Fatal(err)
	}
	dirType := corev1.HostPathDirectory
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodedns.test/client": group}},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "load", Image: testbed.PodToolImage, ImagePullPolicy: corev1.PullNever,
				Args:         append([]string{"load", "-rate", fmt.Sprint(clientRate), "-timeout", lookupTimeout.String(), "-out", "/results/load.log"}, checks...),
				VolumeMounts: []corev1.VolumeMount{{Name: "results", MountPath: "/results"}},
			}},
			Volumes: []corev1.Volume{{Name: "results", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirType}}}},
		},
	}
	if nameserver != "" {
		ndots := "5"
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{
			Nameservers: []string{nameserver},
			Searches:    []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}},
		}
	}
	c := tb.Client()
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}); err != nil {
		t.Fatalf("client %s on %s: %v", name, node, err)
	}
}

// nameservers returns the nameserver lines of a running pod's
// /etc/resolv.conf, read through its container's process on the node
// (/proc/<pid>/root: the node has no PID namespace of its own).
func nameservers(ctx context.Context, t *testing.T, tb *testbed.Testbed, nodes []*testbed.RealNode, ns, pod string) []string {
	t.Helper()
	p, err := tb.Client().CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", pod)
	}
	for _, n := range nodes {
		if n.Name != p.Spec.NodeName {
			continue
		}
		pid, err := n.ContainerPID(ctx, p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" {
				out = append(out, f[1])
			}
		}
		return out
	}
	t.Fatalf("pod %s: node %q is not one of the test's", pod, p.Spec.NodeName)
	return nil
}

// checkNameserver fails t unless pod's resolv.conf names exactly want.
func checkNameserver(ctx context.Context, t *testing.T, tb *testbed.Testbed, nodes []*testbed.RealNode, pod, want string) {
	t.Helper()
	got := nameservers(ctx, t, tb, nodes, "default", pod)
	t.Logf("%s: resolv.conf nameserver %s", pod, strings.Join(got, " "))
	if len(got) != 1 || got[0] != want {
		t.Errorf("%s: resolv.conf nameservers %v, want [%s]", pod, got, want)
	}
}

// groupLoss says why a group of clients may fail or lose lookups in a
// step ("" when it may not), and how many at most (0: any number).
type groupLoss func(step, group string) (why string, limit int)

// reportGroups prints a row of the Real nodes table per step for all
// clients together and, when a step had failures or there are several
// groups, one row per group; it fails t for any failed or lost lookup of a
// group that lossOK does not excuse. Run it deferred, as report.
func reportGroups(t *testing.T, nodes []*testbed.RealNode, results string, steps *stepLog, groups []string, lossOK groupLoss) {
	if len(steps.steps) == 0 {
		return
	}
	steps.end()
	time.Sleep(lookupTimeout + 2*time.Second) // the last second's lookups end and are written
	bySecs := map[string]map[int64]*second{}
	for _, g := range groups {
		if _, err := os.Stat(filepath.Join(results, g)); err == nil {
			bySecs[g] = readResults(t, filepath.Join(results, g))
		}
	}
	var lookups int
	for _, s := range steps.steps {
		var all stats
		rows := []string{}
		for _, g := range groups {
			secs := bySecs[g]
			if secs == nil {
				continue
			}
			st := summarize(secs, s.from, s.to)
			if st.lookups == 0 {
				continue
			}
			all.add(st)
			all.longestGap = max(all.longestGap, st.longestGap)
			rows = append(rows, fmt.Sprintf("|   %s clients | %d | %d | %d | %d | %s | %.2f s | |", g, st.lookups, st.failed, st.lost, st.slow, st.gap(), float64(st.longestWait)/1000))
			if st.failed+st.lost == 0 {
				continue
			}
			t.Logf("%s, %s clients, second by second:\n%s", s.name, g, perSecond(secs, s.from, s.to))
			why, limit := lossOK(s.name, g)
			switch {
			case why != "" && limit > 0 && st.failed+st.lost > limit:
				t.Errorf("%s: %s clients: %d failed and %d lost of %d lookups, more than the %d expected (%s); seconds with failures: %s", s.name, g, st.failed, st.lost, st.lookups, limit, why, st.badSeconds())
			case why != "":
				t.Logf("%s: %s clients: %d failed and %d lost of %d lookups, expected: %s", s.name, g, st.failed, st.lost, st.lookups, why)
			default:
				t.Errorf("%s: %s clients: %d failed and %d lost of %d lookups; seconds with failures: %s", s.name, g, st.failed, st.lost, st.lookups, st.badSeconds())
			}
		}
		lookups += all.lookups
		t.Logf("| %s | %d | %d | %d | %d | %s | %.2f s | `%s` |", s.name, all.lookups, all.failed, all.lost, all.slow, all.gap(), float64(all.longestWait)/1000, s.command)
		if len(rows) > 1 {
			t.Logf("%s", strings.Join(rows, "\n"))
		}
	}
	if t.Failed() {
		for _, n := range nodes {
			t.Logf("%s%s", n.ContainerLogs("kube-system", "", 20000), n.ContainerLogs("default", "client-", 3000))
		}
	}
	if lookups < int(float64(len(nodes)*clientRate)*steps.duration().Seconds()*0.8) {
		t.Errorf("only %d lookups in %s: the clients did not keep their rate", lookups, steps.duration().Round(time.Second))
	}
}

// kubectl runs the built kubectl against tb as an operator would, and
// fails t when it fails.
func kubectl(ctx context.Context, t *testing.T, tb *testbed.Testbed, args ...string) string {
	t.Helper()
	bin, err := testbed.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// deployWeb creates, on a cluster of nodes nodes, a pause DaemonSet
// "web" behind a ClusterIP Service "web" and a headless "web-headless"; it
// returns web's ClusterIP.
func deployWeb(ctx context.Context, t testing.TB, tb *testbed.Testbed, nodes int32) string {
	t.Helper()
	c := tb.Client()
	labels := map[string]string{"app": "web"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "pause", Image: testbed.PauseImage, ImagePullPolicy: corev1.PullNever,
				}}},
			},
		},
	}
	if _, err := c.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}
	web, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: port},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-headless"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: port, ClusterIP: corev1.ClusterIPNone},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testbed.WaitDaemonSetReady(ctx, c, "default", "web", nodes); err != nil {
		t.Fatal(err)
	}
	return web.Spec.ClusterIP
}

// nodeImages are the images a real-node test imports into its nodes.
type nodeImages struct {
	all               []testbed.Archive // everything, for StartRealNodesForTest
	backend, frontend testbed.Archive
}

// buildNodeImages skips t when real nodes (or, with dnsmasq, the dnsmasq
// image) cannot run here, builds the Kubernetes binaries real nodes run
// when they are not cached, then the pod images, the backend's and the
// frontend's, and with dnsmasq the dnsmasq image.
func buildNodeImages(ctx context.Context, t *testing.T, dnsmasq bool) nodeImages {
	t.Helper()
	if r := testbed.RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if dnsmasq {
		if r := testbed.DnsmasqUnavailable(); r != "" {
			t.Skip("dnsmasq image: " + r)
		}
	}
	if err := testbed.RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dir := t.TempDir()
	all, err := testbed.BuildPodImages(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	builds := []func(context.Context, string) (testbed.Archive, error){testbed.BuildBackendImage, testbed.BuildFrontendImage}
	if dnsmasq {
		builds = append(builds, testbed.BuildDnsmasqImage)
	}
	var imgs nodeImages
	for i, build := range builds {
		a, err := build(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, a)
		switch i {
		case 0:
			imgs.backend = a
		case 1:
			imgs.frontend = a
		}
	}
	imgs.all = all
	t.Logf("images built in %s", time.Since(start).Round(time.Millisecond))
	return imgs
}

// kubeadmCluster starts the control plane and two real nodes with imgs, as
// kubeadm leaves a cluster: the CoreDNS Deployment (2 replicas, kubeadm's
// Corefile) behind kube-dns, a "web" DaemonSet behind a ClusterIP and a
// headless Service, and the stub upstream answering externalName. It
// returns the clients' checks of those names.
func kubeadmCluster(ctx context.Context, t testing.TB, imgs nodeImages) (*testbed.Testbed, []*testbed.RealNode, []string) {
	t.Helper()
	start := time.Now()
	tb, nodes := testbed.StartRealNodesForTest(t, []string{"node-a", "node-b"}, imgs.all)
	c := tb.Client()
	t.Logf("control plane and two nodes up in %s", time.Since(start).Round(time.Millisecond))
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}
	if err := testbed.DeployCoreDNS(ctx, c, imgs.backend.Ref, 2); err != nil {
		t.Fatal(err)
	}
	webIP := deployWeb(ctx, t, tb, 2)
	if err := testbed.WaitDeploymentReady(ctx, c, "kube-system", "coredns"); err != nil {
		t.Fatal(err)
	}
	return tb, nodes, []string{
		"web=" + webIP,
		"web-headless=*",
		"kubernetes.default=" + testbed.KubernetesServiceIP,
		externalName + "=" + externalIP,
	}
}

// chartValues are the tests' helm values: mode, kube-dns created by the
// chart or not, the fallback Service open to the pods' and nodes'
// networks, the images built here (never pulled), and podAnnotations (a
// map the caller may change between upgrades, to change the pod template).
func chartValues(frontend testbed.Archive, mode string, createService bool, podAnnotations map[string]any) map[string]any {
	return map[string]any{
		"podAnnotations": podAnnotations,
		"mode":           mode,
		"service":        map[string]any{"clusterIP": testbed.DNSServiceIP, "create": createService},
		"fallback":       map[string]any{"clusterIP": "10.96.0.11", "allowedNetworks": []any{testbed.PodSubnet, testbed.NodeSubnet}},
		// No autoscaler or reconciler here: the hook's watch for CoreDNS
		// coming back (30 s by default, TestHelmInstallReplacesCoreDNS
		// keeps it) only lengthens the run.
		"coreDNS": map[string]any{"settleSeconds": 5},
		"image": map[string]any{
			"frontend":   map[string]any{"repository": images.DefaultRegistry + "/" + images.FrontendName},
			"backend":    map[string]any{"repository": images.DefaultRegistry + "/" + images.BackendName},
			"tag":        frontend.Ref[strings.LastIndexByte(frontend.Ref, ':')+1:],
			"pullPolicy": "Never",
		},
	}
}
