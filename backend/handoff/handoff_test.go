package handoff

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const ns = "kube-system"

func deployment(replicas int32, annotation string, available int32) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns, Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: available,
			UpdatedReplicas: available, ReadyReplicas: available, AvailableReplicas: available},
	}
	if annotation != "" {
		d.Annotations = map[string]string{ReplicasAnnotation: annotation}
	}
	return d
}

// podLabels are the nodedns pods' labels (the chart's, with k8s-app).
var podLabels = map[string]string{"app.kubernetes.io/instance": "nodedns", "app.kubernetes.io/name": "nodedns", "k8s-app": "kube-dns"}

// daemonSet is nodedns's DaemonSet on nodes nodes with ready of its pods
// ready (and all of them updated and available when ready == nodes); pod
// nodedns-i runs on node node-i.
func daemonSet(nodes, ready int) []runtime.Object {
	sel := map[string]string{"app.kubernetes.io/instance": "nodedns", "app.kubernetes.io/name": "nodedns"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "nodedns", Namespace: ns, UID: "ds-uid", Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: int32(nodes),
			UpdatedNumberScheduled: int32(nodes), NumberAvailable: int32(ready), NumberUnavailable: int32(nodes - ready), NumberReady: int32(ready)},
	}
	objs := []runtime.Object{ds}
	yes := true
	for i := range nodes {
		status := corev1.ConditionFalse
		if i < ready {
			status = corev1.ConditionTrue
		}
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodedns-%d", i), Namespace: ns, Labels: podLabels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nodedns", UID: "ds-uid", Controller: &yes}}},
			Spec:   corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
		})
	}
	return objs
}

// node is a Linux node, Ready unless notReady.
func node(name string, notReady bool, mutate ...func(*corev1.Node)) *corev1.Node {
	st := corev1.ConditionTrue
	if notReady {
		st = corev1.ConditionFalse
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	for _, m := range mutate {
		m(n)
	}
	return n
}

// kubeDNS is kubeadm's kube-dns Service, with selector sel when given.
func kubeDNS(sel map[string]string, target intstr.IntOrString) *corev1.Service {
	if sel == nil {
		sel = map[string]string{"k8s-app": "kube-dns"}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: sel, ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: target},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: target},
			{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
		}}}
}

// slice is an EndpointSlice of kube-dns with kubeadm's ports listing the
// pods, ready.
func slice(name string, pods ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	for _, p := range []struct {
		name  string
		proto corev1.Protocol
		port  int32
	}{{"dns", corev1.ProtocolUDP, 53}, {"dns-tcp", corev1.ProtocolTCP, 53}, {"metrics", corev1.ProtocolTCP, 9153}} {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(p.proto), Port: ptr.To(p.port)})
	}
	for i, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p}})
	}
	return s
}

// served is what makes n nodes served by nodedns: the nodes, kube-dns and
// a slice listing nodedns-0..n-1.
func served(n int) []runtime.Object {
	objs := []runtime.Object{kubeDNS(nil, intstr.FromInt32(53))}
	var pods []string
	for i := range n {
		objs = append(objs, node(fmt.Sprintf("node-%d", i), false))
		pods = append(pods, fmt.Sprintf("nodedns-%d", i))
	}
	return append(objs, slice("kube-dns-1", pods...))
}

func newHandoff(t *testing.T, objs ...runtime.Object) (*Handoff, *fake.Clientset, *strings.Builder) {
	c := fake.NewClientset(objs...)
	log := &syncBuilder{}
	return &Handoff{Client: c, Namespace: ns, Deployment: "coredns", DaemonSet: "nodedns", Service: "kube-dns", Replicas: 2,
		Poll: 5 * time.Millisecond, Settle: 20 * time.Millisecond, Converge: 60 * time.Millisecond,
		Logf: log.printf}, c, &log.b
}

// syncBuilder is a log that the tests' goroutines may share.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) printf(f string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, f+"\n", a...)
}

func cat(groups ...[]runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// TestScaleDown: the Deployment is scaled to 0, with its replicas recorded,
// only once every node runs a ready nodedns pod.
func TestScaleDown(t *testing.T) {
	for _, tc := range []struct {
		name           string
		objs           []runtime.Object
		wantErr        error
		wantReplicas   int32 // -1: no Deployment
		wantAnnotation string
		wantLog        string
	}{
		{"every pod ready", cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(2, "", 2)}), nil, 0, "2", "scaled from 2 to 0 replicas"},
		{"three replicas recorded", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "", 3)}), nil, 0, "3", "scaled from 3 to 0"},
		{"one pod not ready", cat(daemonSet(2, 1), served(2), []runtime.Object{deployment(2, "", 2)}), context.DeadlineExceeded, 2, "", "1 of 2 pods ready"},
		{"no node", append(daemonSet(0, 0), deployment(2, "", 2)), context.DeadlineExceeded, 2, "", "0 nodes"},
		{"no DaemonSet", []runtime.Object{deployment(2, "", 2)}, errNotFound, 2, "", ""},
		{"at 0 already", cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(0, "2", 0)}), nil, 0, "2", "nothing to scale down"},
		{"at 0 already, rollout under way", cat(daemonSet(2, 1), served(2), []runtime.Object{deployment(0, "2", 0)}), nil, 0, "2", "nothing to scale down"},
		{"no Deployment", daemonSet(2, 2), nil, -1, "", "nothing to hand off"},
		// Nodes that run no pods need no nodedns pod: cordoned, NotReady,
		// Windows.
		{"only schedulable Linux nodes count", cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(2, "", 2),
			node("cordoned", false, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			node("down", true),
			node("windows", false, func(n *corev1.Node) { n.Labels[corev1.LabelOSStable] = "windows" })}),
			nil, 0, "2", "stayed at 0"},
		// An autoscaler at 0 replicas scales nothing.
		{"autoscaler at 0", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2), autoscaler("dns-autoscaler", 0, "--target=Deployment/coredns")}),
			nil, 0, "2", "is at 0 replicas: it scales nothing"},
		{"autoscaler of another Deployment", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2), autoscaler("other-autoscaler", 1, "--target=deployment/other")}),
			nil, 0, "2", "stayed at 0"},
		// A named targetPort the nodedns pods declare.
		{"named targetPort declared", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(nil, intstr.FromString("dns")),
			slice("s", "nodedns-0"), deployment(2, "", 2)}), nil, 0, "2", "stayed at 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := newHandoff(t, tc.objs...)
			if tc.name == "named targetPort declared" {
				declarePort(t, c, "dns", 53)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := h.ScaleDown(ctx)
			if !matches(err, tc.wantErr) {
				t.Fatalf("ScaleDown: %v, want %v\n%s", err, tc.wantErr, log)
			}
			checkDeployment(t, c, tc.wantReplicas, tc.wantAnnotation)
			if !strings.Contains(log.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, log)
			}
		})
	}
}

// declarePort gives the DaemonSet's pod template a container port name
// (UDP and TCP).
func declarePort(t *testing.T, c *fake.Clientset, name string, port int32) {
	t.Helper()
	ds, err := c.AppsV1().DaemonSets(ns).Get(context.Background(), "nodedns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "backend", Ports: []corev1.ContainerPort{
		{Name: name, ContainerPort: port, Protocol: corev1.ProtocolUDP}, {Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}}}}
	if _, err := c.AppsV1().DaemonSets(ns).Update(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// autoscaler is a cluster-proportional-autoscaler Deployment with args.
func autoscaler(name string, replicas int32, args ...string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "autoscaler", Command: []string{"/cluster-proportional-autoscaler"}, Args: args}}}}}}
}

// TestScaleDownCoexists: where removing CoreDNS is not known to be safe,
// or something else owns its replicas, ScaleDown leaves the Deployment as
// it is and returns a *Coexist whose reason names the cause (nodes,
// labels, ports, the autoscaler) and what to do.
func TestScaleDownCoexists(t *testing.T) {
	withLabel := func(k, v string) *appsv1.Deployment {
		d := deployment(2, "", 2)
		d.Labels = map[string]string{k: v}
		return d
	}
	withAnnotation := func(k, v string) *appsv1.Deployment {
		d := deployment(2, "", 2)
		d.Annotations = map[string]string{k: v}
		return d
	}
	rke2 := map[string]string{"app.kubernetes.io/instance": "rke2-coredns", "app.kubernetes.io/name": "rke2-coredns", "k8s-app": "kube-dns"}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []string // in the reason
	}{
		// A nodeSelector leaving node-2 and node-3 out: the DaemonSet is
		// rolled out on its 2 nodes, DesiredNumberScheduled is met.
		{"partial rollout", cat(daemonSet(2, 2), served(2), []runtime.Object{node("node-2", false), node("node-3", false), deployment(2, "", 2)}),
			[]string{"no ready pod on 2 of 4 schedulable Linux nodes (node-2, node-3)"}},
		{"many nodes uncovered", cat(daemonSet(1, 1), served(1), manyNodes(7), []runtime.Object{deployment(2, "", 2)}),
			[]string{"on 7 of 8", "extra-0, extra-1, extra-2, extra-3, extra-4 and 2 more"}},
		{"RKE2's selector", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(rke2, intstr.FromInt32(53)), slice("s", "nodedns-0"), deployment(2, "", 2)}),
			[]string{"selects app.kubernetes.io/instance=rke2-coredns,app.kubernetes.io/name=rke2-coredns,k8s-app=kube-dns",
				"other values for app.kubernetes.io/instance=rke2-coredns (theirs: nodedns), app.kubernetes.io/name=rke2-coredns (theirs: nodedns)"}},
		{"selector key the pods lack", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(map[string]string{"k8s-app": "kube-dns", "tier": "dns"}, intstr.FromInt32(53)),
			slice("s", "nodedns-0"), deployment(2, "", 2)}),
			[]string{"the nodedns pods lack tier=dns"}},
		{"targetPort differs", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(nil, intstr.FromInt32(5353)), slice("s", "nodedns-0"), deployment(2, "", 2)}),
			[]string{"port dns (53/UDP) targets port 5353", "serve DNS on their node's port 53"}},
		{"named targetPort", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(nil, intstr.FromString("dns")), slice("s", "nodedns-0"), deployment(2, "", 2)}),
			[]string{`targets the port name "dns", which the nodedns pods do not declare`}},
		{"no Service", cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), deployment(2, "", 2)}),
			[]string{"no Service kube-system/kube-dns"}},
		{"no endpoint on a node", cat(daemonSet(2, 2), []runtime.Object{node("node-0", false), node("node-1", false), kubeDNS(nil, intstr.FromInt32(53)),
			slice("s", "nodedns-0"), deployment(2, "", 2)}),
			[]string{"no ready endpoint of a nodedns pod, on all its DNS ports, on node-1"}},
		{"kubespray's dns-autoscaler", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2),
			autoscaler("dns-autoscaler", 1, "--namespace=kube-system", "--configmap=dns-autoscaler", "--target=Deployment/coredns")}),
			[]string{"Deployment kube-system/dns-autoscaler autoscales it (--target=Deployment/coredns)", "kubectl -n kube-system scale deployment dns-autoscaler --replicas=0"}},
		{"autoscaler, --target as two args", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2),
			autoscaler("coredns-autoscaler", 2, "--target", "deployment/coredns")}),
			[]string{"coredns-autoscaler autoscales it (--target=deployment/coredns)"}},
		{"add-on manager", cat(daemonSet(1, 1), served(1), []runtime.Object{withLabel("addonmanager.kubernetes.io/mode", "Reconcile")}),
			[]string{"addonmanager.kubernetes.io/mode=Reconcile", "coreDNS.overrideReconciler=true"}},
		// As k3s's deploy controller leaves it: the hash a label, the
		// owner in annotations.
		{"k3s", cat(daemonSet(1, 1), served(1), []runtime.Object{withLabel("objectset.rio.cattle.io/hash", "abc")}),
			[]string{"the label objectset.rio.cattle.io/hash", "k3s", "coreDNS.overrideReconciler=true"}},
		{"k3s's owner annotation", cat(daemonSet(1, 1), served(1), []runtime.Object{withAnnotation("objectset.rio.cattle.io/owner-gvk", "k3s.cattle.io/v1, Kind=Addon")}),
			[]string{`objectset.rio.cattle.io/owner-gvk="k3s.cattle.io/v1, Kind=Addon"`, "k3s"}},
		{"k3s hash as an annotation", cat(daemonSet(1, 1), served(1), []runtime.Object{withAnnotation("objectset.rio.cattle.io/hash", "abc")}),
			[]string{"objectset.rio.cattle.io/hash", "k3s"}},
		{"scaled down before, back since", cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "2", 3)}),
			[]string{"was scaled down by nodedns before (nodedns.io/coredns-replicas=2) and runs 3 replicas again, more than the 0 it keeps"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := newHandoff(t, tc.objs...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := h.ScaleDown(ctx)
			var co *Coexist
			if !errors.As(err, &co) {
				t.Fatalf("ScaleDown: %v, want a Coexist\n%s", err, log)
			}
			for _, w := range tc.want {
				if !strings.Contains(co.Reason, w) {
					t.Errorf("reason lacks %q:\n%s", w, co.Reason)
				}
			}
			if n := patches(c); n != 0 {
				t.Errorf("%d patches of the Deployment's replicas, want none", n)
			}
			// The reason stays on the Deployment: the Job that logged it
			// is deleted once it succeeds.
			if got := status(t, c); !strings.Contains(got, co.Reason) {
				t.Errorf("%s=%q, want the reason", StatusAnnotation, got)
			}
			if exitCode(err, "scale-down", time.Minute, t.Logf) != 0 {
				t.Errorf("a Coexist does not exit 0")
			}
		})
	}
}

func manyNodes(n int) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		out = append(out, node(fmt.Sprintf("extra-%d", i), false))
	}
	return out
}

// patches counts the patches of the Deployment's replicas.
func patches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "deployments" && strings.Contains(string(p.GetPatch()), `"replicas"`) {
			n++
		}
	}
	return n
}

// status returns the Deployment's StatusAnnotation.
func status(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	d, err := c.AppsV1().Deployments(ns).Get(context.Background(), "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Annotations[StatusAnnotation]
}

// TestScaleDownOverrideReconciler: with OverrideReconciler a Deployment
// marked as an add-on manager's is scaled down; an autoscaler still stops
// it.
func TestScaleDownOverrideReconciler(t *testing.T) {
	d := deployment(2, "", 2)
	d.Labels = map[string]string{"addonmanager.kubernetes.io/mode": "Reconcile"}
	d.Annotations = map[string]string{StatusAnnotation: "CoreDNS stays, serving beside nodedns: an earlier run's reason"}
	h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{d})...)
	h.OverrideReconciler = true
	if err := h.ScaleDown(context.Background()); err != nil {
		t.Fatalf("ScaleDown: %v\n%s", err, log)
	}
	checkDeployment(t, c, 0, "2")
	if got := status(t, c); got != "" {
		t.Errorf("after the scale-down %s=%q, want none", StatusAnnotation, got)
	}

	h, c, log = newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{d, autoscaler("kube-dns-autoscaler", 1, "--target=Deployment/coredns")})...)
	h.OverrideReconciler = true
	var co *Coexist
	if err := h.ScaleDown(context.Background()); !errors.As(err, &co) {
		t.Fatalf("ScaleDown with an autoscaler: %v, want a Coexist\n%s", err, log)
	}
	checkDeployment(t, c, 2, "")
}

// setReplicasWhenAt waits until the Deployment is at at replicas, then
// does what an autoscaler would: sets them to n.
func setReplicasWhenAt(ctx context.Context, t *testing.T, c *fake.Clientset, at, n int32) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			d, err := c.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
			if err == nil && specReplicas(d) == at {
				d.Spec.Replicas = &n
				if _, err := c.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return done
}

// TestScaleDownReplicasComeBack: an owner it did not recognise scales the
// Deployment back up after the scale-down: ScaleDown coexists, naming it,
// and neither it nor the next upgrade's run scales it down again.
func TestScaleDownReplicasComeBack(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(2, "", 2)})...)
	h.Settle = 2 * time.Second // ends as soon as the replicas are back
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := setReplicasWhenAt(ctx, t, c, 0, 4)
	err := h.ScaleDown(ctx)
	<-done
	var co *Coexist
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "is back at 4 replicas") || !strings.Contains(co.Reason, "does not scale it down again") {
		t.Fatalf("ScaleDown: %v, want a Coexist: back at 4 replicas\n%s", err, log)
	}
	if n := patches(c); n != 1 {
		t.Errorf("%d patches, want the one scale-down", n)
	}
	checkDeployment(t, c, 4, "2")

	// The next helm upgrade.
	err = h.ScaleDown(ctx)
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "was scaled down by nodedns before") {
		t.Fatalf("second ScaleDown: %v, want a Coexist\n%s", err, log)
	}
	if n := patches(c); n != 1 {
		t.Errorf("%d patches after the second run, want still 1", n)
	}
}

// TestScaleDownRollback: after the scale-down the Service still lists a
// ready CoreDNS pod (its endpoints never follow): after Converge the
// Deployment gets its replicas back, without the annotation, and the
// reason names the endpoint.
func TestScaleDownRollback(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(3, "", 3), slice("kube-dns-2", "coredns-abc")})...)
	start := time.Now()
	err := h.ScaleDown(context.Background())
	var co *Coexist
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "ready endpoints that are not nodedns pods (1, more than the 0 kept): Pod coredns-abc") ||
		!strings.Contains(co.Reason, "scaled back to 3 replicas") {
		t.Fatalf("ScaleDown: %v, want a Coexist with a rollback\n%s", err, log)
	}
	if el := time.Since(start); el < h.Converge {
		t.Errorf("rolled back after %s, before the bound %s", el, h.Converge)
	}
	if n := patches(c); n != 2 {
		t.Errorf("%d patches, want the scale-down and the rollback", n)
	}
	checkDeployment(t, c, 3, "")
}

// TestScaleDownConverges: the CoreDNS endpoint leaves the Service a moment
// after the scale-down: ScaleDown waits for it and succeeds.
func TestScaleDownConverges(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(2, "", 2), slice("kube-dns-2", "coredns-abc")})...)
	h.Converge = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			d, err := c.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
			if err == nil && specReplicas(d) == 0 {
				time.Sleep(30 * time.Millisecond)
				if err := c.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "kube-dns-2", metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := h.ScaleDown(ctx); err != nil {
		t.Fatalf("ScaleDown: %v\n%s", err, log)
	}
	checkDeployment(t, c, 0, "2")
	if !strings.Contains(log.String(), "ready endpoints are nodedns pods on all 2 nodes and 0 others") {
		t.Errorf("log:\n%s", log)
	}
}

// TestRestore: the Deployment gets its recorded replicas back (or
// Replicas), Restore returns once they are available, and the annotation
// goes only then.
func TestRestore(t *testing.T) {
	for _, tc := range []struct {
		name           string
		d              *appsv1.Deployment
		wantErr        error
		wantReplicas   int32
		wantAnnotation string
	}{
		{"recorded 3", deployment(0, "3", 3), nil, 3, ""},
		{"none recorded", deployment(0, "", 2), nil, 2, ""},
		{"running already", deployment(2, "", 2), nil, 2, ""},
		{"not available in time", deployment(0, "3", 1), context.DeadlineExceeded, 3, "3"},
		{"bad annotation", deployment(0, "many", 0), errBadAnnotation, 0, "many"},
		{"no Deployment", nil, errRefused, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.d != nil {
				objs = append(objs, tc.d)
			}
			h, c, log := newHandoff(t, objs...)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := h.Restore(ctx)
			if !matches(err, tc.wantErr) {
				t.Fatalf("Restore: %v, want %v\n%s", err, tc.wantErr, log)
			}
			checkDeployment(t, c, tc.wantReplicas, tc.wantAnnotation)
		})
	}
}

var (
	errNotFound      = errors.New("not found")
	errBadAnnotation = errors.New("not a positive number")
	errRefused       = errors.New("refused")
)

func matches(err, want error) bool {
	switch want {
	case nil:
		return err == nil
	case errNotFound:
		return apierrors.IsNotFound(errors.Unwrap(err)) || (err != nil && strings.Contains(err.Error(), "not found"))
	case errBadAnnotation:
		return err != nil && strings.Contains(err.Error(), want.Error())
	case errRefused:
		var r *Refusal
		return errors.As(err, &r)
	}
	return errors.Is(err, want)
}

func checkDeployment(t *testing.T, c *fake.Clientset, replicas int32, annotation string) {
	t.Helper()
	d, err := c.AppsV1().Deployments(ns).Get(context.Background(), "coredns", metav1.GetOptions{})
	if replicas < 0 {
		if !apierrors.IsNotFound(err) {
			t.Errorf("Deployment: %v, want none", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := specReplicas(d); got != replicas {
		t.Errorf("replicas %d, want %d", got, replicas)
	}
	if got := d.Annotations[ReplicasAnnotation]; got != annotation {
		t.Errorf("%s=%q, want %q", ReplicasAnnotation, got, annotation)
	}
}

// TestMainUsage: bad command lines exit 2 with the usage, before any
// API call.
func TestMainUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"adopt"}, {"restore", "--replicas=0"}, {"scale-down", "--keep-replicas=-1"}, {"scale-down", "extra"}, {"restore", "--timeout=-1s"}, {"scale-down", "--nope"},
		{"scale-down", "--pod-ports=0"}, {"scale-down", "--pod-ports=53,x"}, {"scale-down", "--settle=0s"}, {"scale-down", "--converge=-1s"}, {"scale-down", "--service="}} {
		var out strings.Builder
		if code := Main(args, &out); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, out.String())
		}
	}
}

// TestRestoreRefusal: with no Deployment to restore, Restore refuses with
// a message that says what to do, and Main's exit code is RefusalExitCode
// (the Job's podFailurePolicy fails it at once); AllowNoDNS lets it
// through with a warning, and also a Deployment that never becomes
// available.
// TestRestoreWaitsForTheService: Restore returns only once the DNS
// Service lists a ready endpoint that is not a nodedns pod, and fails
// (nodedns stays) when it never does.
func TestRestoreWaitsForTheService(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []string // the Service's ready endpoints
		want string   // in the error; "" success
	}{
		{"CoreDNS listed", []string{"nodedns-0", "coredns-abc"}, ""},
		{"nodedns only", []string{"nodedns-0"}, "lists no ready endpoint besides the nodedns pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := cat(daemonSet(1, 1), []runtime.Object{node("node-0", false), kubeDNS(nil, intstr.FromInt32(53)), slice("s", tc.pods...), deployment(0, "2", 2)})
			h, _, log := newHandoff(t, objs...)
			err := h.Restore(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Restore: %v\n%s", err, log)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Restore: %v, want an error naming %q\n%s", err, tc.want, log)
			}
		})
	}
}

func TestRestoreRefusal(t *testing.T) {
	h, _, log := newHandoff(t)
	err := h.Restore(context.Background())
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("Restore: %v, want a Refusal\n%s", err, log)
	}
	for _, w := range []string{"no Deployment kube-system/coredns", "Service kube-system/kube-dns", "Deploy a DNS server", "coreDNS.allowUninstallWithoutDNS=true"} {
		if !strings.Contains(r.Reason, w) {
			t.Errorf("refusal lacks %q: %s", w, r.Reason)
		}
	}
	if code := exitCode(err, "restore", time.Minute, t.Logf); code != RefusalExitCode {
		t.Errorf("exit %d, want %d", code, RefusalExitCode)
	}
	if code := exitCode(errors.New("boom"), "restore", time.Minute, t.Logf); code != 1 {
		t.Errorf("a failure exits %d, want 1", code)
	}

	h, _, log = newHandoff(t)
	h.AllowNoDNS = true
	if err := h.Restore(context.Background()); err != nil {
		t.Fatalf("Restore with AllowNoDNS: %v", err)
	}
	if !strings.Contains(log.String(), "WARNING: going ahead (--allow-no-dns)") {
		t.Errorf("no warning:\n%s", log)
	}

	h, c, log := newHandoff(t, deployment(0, "3", 1))
	h.AllowNoDNS = true
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := h.Restore(ctx); err != nil {
		t.Fatalf("Restore with AllowNoDNS, never available: %v\n%s", err, log)
	}
	checkDeployment(t, c, 3, "3")
}

// TestScaleDownUpgradeUncovers: CoreDNS is at 0 from an earlier install and
// an upgrade leaves a node without a nodedns pod (a new nodeSelector): the
// hook gives CoreDNS its recorded replicas back and says why.
func TestScaleDownUpgradeUncovers(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(2, 2), served(2), []runtime.Object{node("node-2", false), deployment(0, "3", 0)})...)
	err := h.ScaleDown(context.Background())
	var co *Coexist
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "no pod on 1 of 3 schedulable Linux nodes (node-2) since this upgrade") ||
		!strings.Contains(co.Reason, "scaled back to 3 replicas") {
		t.Fatalf("ScaleDown: %v, want a Coexist scaling CoreDNS back\n%s", err, log)
	}
	checkDeployment(t, c, 3, "")
}

// TestScaleDownRollbackAtTimeout: the hook's own time runs out while the
// Service still lists CoreDNS after the scale-down: CoreDNS is scaled
// back all the same, and the hook fails.
func TestScaleDownRollbackAtTimeout(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2), slice("kube-dns-2", "coredns-abc")})...)
	h.Converge = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := h.ScaleDown(ctx)
	var co *Coexist
	if err == nil || errors.As(err, &co) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ScaleDown: %v, want the deadline's failure\n%s", err, log)
	}
	checkDeployment(t, c, 2, "")
}

// TestScaleDownKeep: with Keep the Deployment is scaled down to Keep
// replicas, never up, its replicas recorded as with 0; the kept replicas'
// endpoints may stay in the Service, and only replicas above Keep count
// as coming back. An upgrade raises one nodedns scaled further down to
// Keep (never above what it recorded).
func TestScaleDownKeep(t *testing.T) {
	for _, tc := range []struct {
		name           string
		keep           int32
		objs           []runtime.Object
		wantReplicas   int32
		wantAnnotation string
		wantLog        string
		wantPatches    int
	}{
		// The kept pod stays a ready endpoint of the Service.
		{"2 to 1", 1, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(2, "", 2), slice("kube-dns-2", "coredns-abc")}), 1, "2",
			"scaled from 2 to 1 replicas", 1},
		{"3 to 2", 2, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "", 3), slice("kube-dns-2", "coredns-a", "coredns-b")}), 2, "3",
			"stayed at 2", 1},
		{"at keep, never up", 1, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(1, "", 1)}), 1, "", "at most the 1 kept", 0},
		{"at 0, never up", 1, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(0, "", 0)}), 0, "", "at most the 1 kept", 0},
		{"below keep, never up", 3, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(2, "", 2)}), 2, "", "at most the 3 kept", 0},
		{"upgrade, kept already", 1, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(1, "2", 1)}), 1, "2", "nothing to scale down", 0},
		{"upgrade from a release that kept none", 1, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(0, "2", 0)}), 1, "2", "scaled from 0 to the 1 kept", 1},
		{"upgrade, raised no further than recorded", 3, cat(daemonSet(2, 2), served(2), []runtime.Object{deployment(0, "2", 0)}), 2, "2", "scaled from 0 to the 2 kept", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := newHandoff(t, tc.objs...)
			h.Keep = tc.keep
			if err := h.ScaleDown(context.Background()); err != nil {
				t.Fatalf("ScaleDown: %v\n%s", err, log)
			}
			checkDeployment(t, c, tc.wantReplicas, tc.wantAnnotation)
			if n := patches(c); n != tc.wantPatches {
				t.Errorf("%d patches of the replicas, want %d\n%s", n, tc.wantPatches, log)
			}
			if !strings.Contains(log.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, log)
			}
		})
	}
}

// TestScaleDownKeepRollback: with Keep 1, two CoreDNS endpoints that stay
// in the Service are one more than kept: CoreDNS gets its replicas back.
func TestScaleDownKeepRollback(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "", 3), slice("kube-dns-2", "coredns-a", "coredns-b")})...)
	h.Keep = 1
	err := h.ScaleDown(context.Background())
	var co *Coexist
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "not nodedns pods (2, more than the 1 kept): Pod coredns-a, Pod coredns-b") ||
		!strings.Contains(co.Reason, "scaled back to 3 replicas") {
		t.Fatalf("ScaleDown: %v, want a Coexist with a rollback\n%s", err, log)
	}
	checkDeployment(t, c, 3, "")
}

// TestScaleDownKeepDualStack: a dual-stack kube-dns has a slice per
// address family, both naming the one kept CoreDNS pod: that is one
// endpoint, not two more than kept (found on the dual-stack shape, where
// the handoff rolled CoreDNS back).
func TestScaleDownKeepDualStack(t *testing.T) {
	v6 := slice("kube-dns-v6", "coredns-a")
	v6.AddressType = discoveryv1.AddressTypeIPv6
	v6.Endpoints[0].Addresses = []string{"fd00::1"}
	h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "", 3), slice("kube-dns-v4", "coredns-a"), v6})...)
	h.Keep = 1
	h.Settle = time.Second
	if err := h.ScaleDown(context.Background()); err != nil {
		t.Fatalf("ScaleDown: %v\n%s", err, log)
	}
	checkDeployment(t, c, 1, "3")
}

// TestScaleDownKeepComesBack: with Keep 1, replicas set to 2 after the
// scale-down to 1 are someone else's; the next run does not scale down.
func TestScaleDownKeepComesBack(t *testing.T) {
	h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{deployment(3, "", 3)})...)
	h.Keep = 1
	h.Settle = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := setReplicasWhenAt(ctx, t, c, 1, 2)
	err := h.ScaleDown(ctx)
	<-done
	var co *Coexist
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "is back at 2 replicas") || !strings.Contains(co.Reason, "after nodedns scaled it to 1") {
		t.Fatalf("ScaleDown: %v, want a Coexist: back at 2 replicas\n%s", err, log)
	}
	checkDeployment(t, c, 2, "3")
	err = h.ScaleDown(ctx)
	if !errors.As(err, &co) || !strings.Contains(co.Reason, "runs 2 replicas again, more than the 1 it keeps") {
		t.Fatalf("second ScaleDown: %v, want a Coexist\n%s", err, log)
	}
	if n := patches(c); n != 1 {
		t.Errorf("%d patches, want the one scale-down", n)
	}
}

// TestRestoreKept: uninstall's restore scales the kept replicas back to
// the recorded number, never below what runs.
func TestRestoreKept(t *testing.T) {
	for _, tc := range []struct {
		name         string
		d            *appsv1.Deployment
		wantReplicas int32
		wantPatches  int
	}{
		{"kept 1 of 3", deployment(1, "3", 3), 3, 1},
		{"more than recorded", deployment(4, "2", 4), 4, 0},
		{"bad annotation, running", deployment(2, "many", 2), 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := newHandoff(t, tc.d)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := h.Restore(ctx); err != nil {
				t.Fatalf("Restore: %v\n%s", err, log)
			}
			checkDeployment(t, c, tc.wantReplicas, "")
			if n := patches(c); n != tc.wantPatches {
				t.Errorf("%d patches of the replicas, want %d", n, tc.wantPatches)
			}
		})
	}
}
