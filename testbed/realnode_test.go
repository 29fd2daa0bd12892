package testbed

import (
	"context"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// externalName is answered by the stub upstream only: a pod resolving it
// went through CoreDNS's forward to the node's resolv.conf.
const (
	externalName = "external.nodedns.test"
	externalIP   = "192.0.2.53" // TEST-NET-1: an answer, never a destination
)

// TestRealNodes brings up two kubelet nodes, runs a DaemonSet of the pause
// image on both, CoreDNS as kubeadm deploys it (two replicas of the
// backend image), and on each node a client pod that resolves a Service
// name through the search path, kubernetes.default and a name only the
// stub upstream knows; then kubectl logs, exec, port-forward and a
// pods/proxy GET against a `podtool serve` pod on each node (the API
// server reaches kubelets and pods through its egress proxy,
// realnode_kubectl_test.go); then pods whose images are pulled from a registry
// the test started, on node-a through the mirror it started with, on
// node-b once the mirror is added (registry_realnode_test.go). Then Stop,
// and nothing of the run may be left: no
// cgroup, namespace, directory or process, and the host's links,
// addresses, mounts and the sysctls kubelet would write unchanged.
func TestRealNodes(t *testing.T) {
	if r := RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if err := RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	hostBefore := hostSnapshot(t)
	tb := StartForTest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := tb.Client()

	start := time.Now()
	imgDir := t.TempDir()
	archives, err := BuildPodImages(ctx, imgDir)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := BuildBackendImage(ctx, imgDir)
	if err != nil {
		t.Fatal(err)
	}
	archives = append(archives, backend)
	t.Logf("images built in %s", time.Since(start).Round(time.Millisecond))

	if err := tb.StartControllers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetStubRecord(externalName, net.ParseIP(externalIP)); err != nil {
		t.Fatal(err)
	}
	reg, err := tb.StartRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var nodes []*RealNode
	for i, name := range []string{"node-a", "node-b"} {
		opts := RealNodeOptions{Images: archives}
		if i == 0 { // node-b gets the registry later, with AddRegistry
			opts.Registries = []*Registry{reg}
		}
		n, err := tb.AddRealNode(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	t.Logf("two nodes Ready in %s", time.Since(start).Round(time.Millisecond))
	imgs, err := nodes[0].Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range archives {
		if !imageListed(imgs, a.Ref, a.Digest) {
			t.Errorf("node-a's containerd lacks %s@%s after import:\n%s", a.Ref, a.Digest, imgs)
		}
	}

	start = time.Now()
	if err := DeployCoreDNS(ctx, c, backend.Ref, 2); err != nil {
		t.Fatal(err)
	}
	ds := pauseDaemonSet()
	if _, err := c.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: ds.Spec.Selector.MatchLabels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	greeting := "greeting-" + randomToken()[:8]
	if _, err := c.AppsV1().DaemonSets("default").Create(ctx, serveDaemonSet(greeting), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ds.Name, "serve"} {
		if err := WaitDaemonSetReady(ctx, c, "default", name, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := WaitDeploymentReady(ctx, c, "kube-system", "coredns"); err != nil {
		t.Fatal(err)
	}
	t.Logf("DaemonSet on both nodes and CoreDNS ready in %s", time.Since(start).Round(time.Millisecond))

	for _, n := range nodes {
		pod := resolverPod("client-"+n.Name, n.Name,
			"web="+web.Spec.ClusterIP,
			"kubernetes.default="+KubernetesServiceIP,
			externalName+"="+externalIP)
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		phase, msg := waitPodDone(ctx, t, c, "default", "client-"+n.Name)
		t.Logf("client on %s: %s\n%s", n.Name, phase, msg)
		if phase != corev1.PodSucceeded {
			t.Errorf("client on %s: %s, want Succeeded: %s", n.Name, phase, msg)
		}
	}
	start = time.Now()
	t.Run("kubelet access", func(t *testing.T) {
		testKubeletAccess(ctx, t, tb, nodes, greeting)
	})
	t.Logf("kubectl logs, exec, port-forward, pods/proxy on both nodes and services/proxy in %s", time.Since(start).Round(time.Millisecond))
	pause := archiveOf(t, archives, PauseImage)
	t.Run("pull from registry", func(t *testing.T) {
		testRegistryPull(ctx, t, tb, reg, nodes[0], pause)
	})
	t.Run("pull from registry added to a running node", func(t *testing.T) {
		testPullNeedsMirror(ctx, t, tb, reg, nodes[1], pause)
		if err := nodes[1].AddRegistry(reg); err != nil {
			t.Fatal(err)
		}
		testRegistryPull(ctx, t, tb, reg, nodes[1], pause)
	})
	if d := diffLines(hostBefore, hostSnapshot(t), tb.Dir); d != "" {
		t.Errorf("the host changed while real nodes ran:\n%s", d)
	}

	if err := tb.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if left := tb.RealNodeLeftovers(); len(left) > 0 {
		t.Errorf("left after Stop: %v", left)
	}
	if d := diffLines(hostBefore, hostSnapshot(t), tb.Dir); d != "" {
		t.Errorf("the host changed after Stop:\n%s", d)
	}
}

// archiveOf returns the archive of ref among archives.
func archiveOf(t *testing.T, archives []Archive, ref string) Archive {
	t.Helper()
	for _, a := range archives {
		if a.Ref == ref {
			return a
		}
	}
	t.Fatalf("no archive of %s", ref)
	return Archive{}
}

// imageListed reports whether `ctr images ls` output has ref with digest.
func imageListed(ls, ref, digest string) bool {
	for _, l := range strings.Split(ls, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == ref && f[2] == digest {
			return true
		}
	}
	return false
}

func pauseDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "pause"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
				}}},
			},
		},
	}
}

func resolverPod(name, node string, checks ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "resolve", Image: PodToolImage, ImagePullPolicy: corev1.PullNever,
				Args: append([]string{"resolve", "-timeout", "90s"}, checks...),
			}},
		},
	}
}

// waitPodDone waits for the pod to end and returns its phase and its
// container's termination message.
func waitPodDone(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) (corev1.PodPhase, string) {
	t.Helper()
	var phase corev1.PodPhase
	var msg string
	err := waitFor(ctx, "pod "+name+" done", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil {
				msg = s.State.Terminated.Message
			} else if s.State.Waiting != nil {
				msg = s.State.Waiting.Reason + ": " + s.State.Waiting.Message
			}
		}
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("%v (phase %s, %s)", err, phase, msg)
	}
	return phase, msg
}

// hostSnapshot is what real nodes must leave alone in the host's
// namespaces: links, addresses, routes, mounts (but /run/netns, where every
// `ip netns add` on the machine binds its namespace), and the kernel
// sysctls kubelet would write.
func hostSnapshot(t *testing.T) []string {
	t.Helper()
	var lines []string
	for _, args := range [][]string{{"-o", "link", "show"}, {"-o", "addr", "show"}, {"route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			t.Fatalf("ip %v: %v", args, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			lines = append(lines, "ip "+args[len(args)-2]+": "+l)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(mounts)), "\n") {
		if f := strings.Fields(l); len(f) > 1 && !strings.HasPrefix(f[1], "/run/netns") {
			lines = append(lines, "mount: "+l)
		}
	}
	for _, k := range kernelDefaults {
		b, err := os.ReadFile("/proc/sys/" + k.path)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "sysctl "+k.path+"="+strings.TrimSpace(string(b)))
	}
	sort.Strings(lines)
	return lines
}

// diffLines lists lines only in a ("-") or only in b ("+") that real nodes
// could have made: other test packages run beside this one and make their
// own (namespaces, veth pairs on their way into them), so a change counts
// only when it names something of a real node: its links, subnets, the
// testbed directory dir, cgroups, /proc/sys, /run, /var, or a sysctl.
func diffLines(a, b []string, dir string) string {
	in := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range list {
			m[l] = true
		}
		return m
	}
	ours := func(l string) bool {
		if strings.HasPrefix(l, "sysctl ") {
			return true
		}
		for _, mark := range []string{dir, "cni0", "veth", NodeInterface, "10.244.", "172.31.254.", "10.96.", cgroupFS, "/proc/sys", " /run ", " /var "} {
			if strings.Contains(l, mark) {
				return true
			}
		}
		return false
	}
	ina, inb := in(a), in(b)
	var d []string
	for _, l := range a {
		if !inb[l] && ours(l) {
			d = append(d, "- "+l)
		}
	}
	for _, l := range b {
		if !ina[l] && ours(l) {
			d = append(d, "+ "+l)
		}
	}
	return strings.Join(d, "\n")
}
