package scenario

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/loadtest/gen"
)

// TestDSServices: each DaemonSet design's kube-dns keeps lookups on the
// node its own way, selects only its own pods, and the two differ in
// nothing else.
func TestDSServices(t *testing.T) {
	local, prefer := dsLocal.service(), dsPrefer.service()
	if p := local.Spec.InternalTrafficPolicy; p == nil || *p != corev1.ServiceInternalTrafficPolicyLocal || local.Spec.TrafficDistribution != nil {
		t.Errorf("coredns-ds-local: internalTrafficPolicy %v, trafficDistribution %v; want Local and none", p, local.Spec.TrafficDistribution)
	}
	if d := prefer.Spec.TrafficDistribution; d == nil || *d != corev1.ServiceTrafficDistributionPreferSameNode || prefer.Spec.InternalTrafficPolicy != nil {
		t.Errorf("coredns-ds-prefer: trafficDistribution %v, internalTrafficPolicy %v; want PreferSameNode and none", d, prefer.Spec.InternalTrafficPolicy)
	}
	if local.Name == prefer.Name || local.Spec.ClusterIP == prefer.Spec.ClusterIP || reflect.DeepEqual(local.Spec.Selector, prefer.Spec.Selector) {
		t.Errorf("the two Services share a name, address or selector: %s %s %v, %s %s %v",
			local.Name, local.Spec.ClusterIP, local.Spec.Selector, prefer.Name, prefer.Spec.ClusterIP, prefer.Spec.Selector)
	}
	if !reflect.DeepEqual(local.Spec.Ports, prefer.Spec.Ports) || len(local.Spec.Ports) != 2 {
		t.Errorf("ports differ or are not UDP and TCP 53: %v %v", local.Spec.Ports, prefer.Spec.Ports)
	}
}

// TestDSPods: a node's pod is selected by its design's Service only; the
// other node's pod (the fallback) by both.
func TestDSPods(t *testing.T) {
	selects := func(svc *corev1.Service, pod *corev1.Pod) bool {
		for k, v := range svc.Spec.Selector {
			if pod.Labels[k] != v {
				return false
			}
		}
		return true
	}
	node := dsPod("node-x", "10.244.1.254", dsPrefer.label)
	central := dsPod("node-central", CentralIP, dsLocal.label, dsPrefer.label)
	if selects(dsLocal.service(), node) || !selects(dsPrefer.service(), node) {
		t.Errorf("pod with labels %v: selected by the wrong Service", node.Labels)
	}
	if !selects(dsLocal.service(), central) || !selects(dsPrefer.service(), central) {
		t.Errorf("central pod with labels %v: not selected by both Services", central.Labels)
	}
	if node.Spec.NodeName != "node-x" || node.Name != dsPodName("node-x") {
		t.Errorf("pod %s on %q", node.Name, node.Spec.NodeName)
	}
	for _, ready := range []bool{false, true} {
		st := podStatus("10.244.1.254", "172.31.254.2", ready)
		got := false
		for _, c := range st.Conditions {
			if c.Type == corev1.PodReady {
				got = c.Status == corev1.ConditionTrue
			}
		}
		if got != ready || st.PodIP != "10.244.1.254" || st.Phase != corev1.PodRunning {
			t.Errorf("podStatus(ready=%v): Ready %v, IP %s, phase %s", ready, got, st.PodIP, st.Phase)
		}
	}
}

// TestDSCorefile: kubeadm's Corefile, every address of it the pod's.
func TestDSCorefile(t *testing.T) {
	c := dsCorefile("/k/config", "10.244.3.254")
	if strings.Contains(c, CentralIP) {
		t.Errorf("Corefile still names %s:\n%s", CentralIP, c)
	}
	for _, want := range []string{"bind 10.244.3.254", "ready 10.244.3.254:8181", "prometheus 10.244.3.254:9153", "kubeconfig /k/config", "forward . " + UpstreamIP} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
}

// TestDesignsRun: compare's last line names each design once, in the
// order it ran, chaos-only designs too.
func TestDesignsRun(t *testing.T) {
	r := &Report{
		Rows:  []Row{{Design: "coredns"}, {Design: "coredns-ds-prefer"}},
		Chaos: []ChaosRow{{Design: "coredns"}, {Design: "coredns-ds-prefer"}, {Design: "nodedns"}},
	}
	if got, want := r.DesignsRun(), []string{"coredns", "coredns-ds-prefer", "nodedns"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DesignsRun() = %q, want %q", got, want)
	}
	all, err := ParseDesigns("all")
	if err != nil || !strings.Contains(strings.Join(all, ","), "coredns-ds-local,coredns-ds-prefer,nodedns") {
		t.Errorf("all = %q, %v: want the DaemonSet designs before nodedns", all, err)
	}
}

// TestWriteSummary: one row per design, its chaos rows added up and the
// experiment with the most lost and failed lookups named.
func TestWriteSummary(t *testing.T) {
	r := &Report{
		Rows: []Row{{Design: "nodedns", ConntrackNew: 14, Load: &gen.Result{}}},
		Chaos: []ChaosRow{
			{Experiment: "backend killed", Design: "nodedns", Lost: 1, Failed: 2, Slow: 3},
			{Experiment: "crash loop", Design: "nodedns", Lost: 5, Slow: 1},
			{Experiment: "backend killed", Design: "coredns-ds-local", Lost: 7},
		},
	}
	var b strings.Builder
	r.WriteSummary(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header, rule and 2 rows, got:\n%s", b.String())
	}
	for i, want := range []string{
		"| nodedns |", "| 14 |", "| 2 | 6 | 2 | 4 | crash loop (5) |",
	} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("row %q lacks %q (%d)", lines[2], want, i)
		}
	}
	if !strings.HasPrefix(lines[3], "| coredns-ds-local | | | | | | | | | | | 1 | 7 | 0 | 0 | backend killed (7) |") {
		t.Errorf("chaos-only design's row: %q", lines[3])
	}
}

// TestFallbackPort: the harness's nodedns-fallback Service and endpoints
// use the port the chart's frontend (--fallback) and holder (--relay)
// dial; with another port the fallback and the relay reach nothing.
func TestFallbackPort(t *testing.T) {
	port, err := fallbackPort()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, helm.Node{Name: "n", IP: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	want := FallbackServiceIP + ":" + strconv.Itoa(int(port))
	found := 0
	for _, c := range cs {
		for _, a := range c.Command {
			for _, flag := range []string{"--fallback=", "--relay="} {
				if v, ok := strings.CutPrefix(a, flag); ok {
					found++
					if v != want {
						t.Errorf("%s %s%s, the harness's Service is %s", c.Spec.Name, flag, v, want)
					}
				}
			}
		}
	}
	if found < 2 {
		t.Errorf("the chart renders %d of --fallback and --relay, want both", found)
	}
}
