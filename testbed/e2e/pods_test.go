package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/testbed"
)

const nodednsSelector = "app.kubernetes.io/instance=nodedns"

// nodednsPod returns the running, not terminating nodedns pod on node.
func nodednsPod(ctx context.Context, t *testing.T, tb *testbed.Testbed, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := waitUntil(ctx, func() bool {
		list, err := tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
			LabelSelector: nodednsSelector, FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return false
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pod = p
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no running nodedns pod on %s: %v\n%s", node, err, podStates(ctx, tb))
	}
	return pod
}

// containerStatus returns the status of a pod's container (or native
// sidecar) by name.
func containerStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// restart records one container restart: how long from the kill until
// kubelet ran the container again and until it was ready.
type restart struct {
	running, ready time.Duration
	reason         string // of the last termination, as kubelet reports it
	finished       time.Time
	restarts       int32
}

func (r restart) String() string {
	return fmt.Sprintf("running again after %s, ready after %s (restart %d, last exit %s)",
		r.running.Round(100*time.Millisecond), r.ready.Round(100*time.Millisecond), r.restarts, r.reason)
}

// waitRestarted waits until container name of pod has restarted more than
// before times and is ready again.
func waitRestarted(ctx context.Context, t *testing.T, tb *testbed.Testbed, pod *corev1.Pod, name string, before int32, since time.Time) restart {
	t.Helper()
	var r restart
	err := waitUntilEvery(ctx, 100*time.Millisecond, func() bool {
		p, err := tb.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		cs, ok := containerStatus(p, name)
		if !ok || cs.RestartCount <= before || cs.State.Running == nil {
			return false
		}
		if r.running == 0 {
			r.running = cs.State.Running.StartedAt.Sub(since)
			if r.running < 0 { // StartedAt has second resolution
				r.running = 0
			}
		}
		r.restarts = cs.RestartCount
		if x := cs.LastTerminationState.Terminated; x != nil {
			r.reason = fmt.Sprintf("%d %s", x.ExitCode, x.Reason)
			r.finished = x.FinishedAt.Time
		}
		if cs.Ready {
			r.ready = time.Since(since)
			return true
		}
		return false
	})
	if err != nil {
		t.Fatalf("%s of %s not restarted and ready: %v\n%s", name, pod.Name, err, podStates(ctx, tb))
	}
	return r
}

// oomKill gets the frontend of n's nodedns pod OOM-killed by its memory
// limit, by configuration alone: its cache holds more large answers
// (floodCacheSize) than the limit has room for, and a flood of names
// under floodZone, sent from n's network namespace to the frontend,
// fills it. It waits until kubelet has restarted the container and it is
// ready again; the flood stops once the frontend no longer answers, so
// the restarted one, its cache empty, is not flooded again. The flood
// goes to addr, one of the frontend's addresses on n.
func oomKill(ctx context.Context, t *testing.T, tb *testbed.Testbed, n *testbed.RealNode, addr string) restart {
	t.Helper()
	pod := nodednsPod(ctx, t, tb, n.Name)
	cs, _ := containerStatus(pod, "frontend")
	t.Logf("%s frontend before the flood: %s", n.Name, memoryCgroup(ctx, n, cs.ContainerID))
	if err := tb.SetStubWideZone(floodZone, floodRecords); err != nil {
		t.Fatal(err)
	}
	conn, err := n.ListenPacket("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(addr), Port: 53}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	flooded := make(chan floodResult, 1)
	at := time.Now()
	go func() { flooded <- floodCache(fctx, conn, dst, floodZone, floodCacheSize) }()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r := waitRestarted(wctx, t, tb, pod, "frontend", cs.RestartCount, at)
	stop()
	f := <-flooded
	t.Logf("%s frontend: flood from %s: %s; the container's exit at %s (kubelet's second resolution)",
		n.Name, at.UTC().Format("15:04:05.000"), f, r.finished.UTC().Format("15:04:05"))
	if f.answered == 0 {
		t.Errorf("the frontend answered none of the flood's %d queries", f.sent)
	}
	return r
}

// memoryCgroup describes the memory cgroup of a container's process: its
// path, limit and usage, or why they could not be read.
func memoryCgroup(ctx context.Context, n *testbed.RealNode, id string) string {
	pid, err := n.ContainerPID(ctx, id)
	if err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[1] != "memory" {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup/memory", f[2])
		out := "memory cgroup " + f[2]
		for _, name := range []string{"memory.limit_in_bytes", "memory.usage_in_bytes"} {
			v, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				out += " " + err.Error()
				continue
			}
			out += " " + name + "=" + strings.TrimSpace(string(v))
		}
		return out
	}
	return fmt.Sprintf("pid %d: no memory cgroup in /proc/%d/cgroup", pid, pid)
}

// waitRolledOut waits until the DaemonSet's controller has seen its
// latest spec, every node runs an updated, available pod, and no old pod
// is left.
func waitRolledOut(ctx context.Context, t *testing.T, tb *testbed.Testbed, name string, nodes int) {
	t.Helper()
	c := tb.Client()
	err := waitUntil(ctx, func() bool {
		ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil || !rolledOut(ds, int32(nodes)) {
			return false
		}
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: nodednsSelector})
		return err == nil && len(pods.Items) == nodes
	})
	if err != nil {
		t.Fatalf("daemonset %s not rolled out: %v\n%s", name, err, podStates(ctx, tb))
	}
}

func rolledOut(ds *appsv1.DaemonSet, n int32) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled == n &&
		s.UpdatedNumberScheduled == n && s.NumberAvailable == n && s.NumberUnavailable == 0
}

// nodeLeftovers returns what a nodedns frontend left on a node: rules
// carrying its comment and its interface or addresses.
func nodeLeftovers(ctx context.Context, n *testbed.RealNode) string {
	var left []string
	for _, save := range []string{"iptables-save", "iptables-legacy-save"} {
		out, err := n.Run(ctx, save)
		if err != nil {
			left = append(left, err.Error())
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "nodedns:") {
				left = append(left, save+": "+l)
			}
		}
	}
	out, err := n.Run(ctx, "ip", "-o", "addr", "show")
	if err != nil {
		left = append(left, err.Error())
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " nodedns ") || strings.Contains(l, "169.254.20.10") || strings.Contains(l, testbed.DNSServiceIP+"/") {
			left = append(left, "address: "+l)
		}
	}
	if out, err := n.Run(ctx, "ip", "-o", "link", "show", "nodedns"); err == nil {
		left = append(left, "link: "+strings.TrimSpace(string(out)))
	}
	return strings.Join(left, "\n")
}

func waitUntilEvery(ctx context.Context, every time.Duration, cond func() bool) error {
	t := time.NewTicker(every)
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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
