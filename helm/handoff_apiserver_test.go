package helm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodedns/nodedns/backend/handoff"
	"github.com/nodedns/nodedns/testbed"
)

// TestHandoffAsChartRole runs the handoff (backend/handoff) against a real
// kube-apiserver with the credentials of the chart's handoff
// ServiceAccount and nothing more: the Role the chart renders is enough
// for scale-down (its checks included: nodes, the kube-dns Service and its
// EndpointSlices, the Deployments) and restore, and reaches no other
// Deployment. The
// testbed runs no controllers: the test writes the statuses the DaemonSet
// and Deployment controllers would.
func TestHandoffAsChartRole(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := tb.Client()
	const ns = DefaultNamespace

	_, objs, _ := render(t, "")
	for _, o := range objs {
		var err error
		switch v := o.Obj.(type) {
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(ns).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(ns).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			if v.Name == "nodedns-handoff" {
				_, err = c.RbacV1().ClusterRoles().Create(ctx, v, metav1.CreateOptions{})
			}
		case *rbacv1.ClusterRoleBinding:
			if v.Name == "nodedns-handoff" {
				_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, metav1.CreateOptions{})
			}
		case *appsv1.DaemonSet:
			_, err = c.AppsV1().DaemonSets(ns).Create(ctx, v, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("create %s: %v", o.Source, err)
		}
	}
	ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, "nodedns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
		UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberReady: 2}
	if _, err := c.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	yes := true
	var pods []*corev1.Pod
	for i := range 2 {
		// Two Ready Linux nodes, one nodedns pod on each.
		n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Labels: map[string]string{corev1.LabelOSStable: "linux"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodedns-%d", i), Labels: ds.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &yes}}},
			// The chart's ServiceAccount: the testbed runs no controller
			// that would create "default".
			Spec: corev1.PodSpec{NodeName: n.Name, ServiceAccountName: "nodedns", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	setReady := func(p *corev1.Pod, ready bool) {
		t.Helper()
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setReady(pods[0], true)
	setReady(pods[1], false)
	if err := testbed.DeployCoreDNS(ctx, c, "coredns:test", 2); err != nil {
		t.Fatal(err)
	}
	setDeploymentStatus := func(available int32) {
		t.Helper()
		d, err := c.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: available, UpdatedReplicas: available, ReadyReplicas: available, AvailableReplicas: available}
		if _, err := c.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setDeploymentStatus(2)
	// kube-dns's EndpointSlice as the controller (not run here) would
	// write it once both nodedns pods are ready: both, on kubeadm's ports.
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-nodedns", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	for _, p := range []struct {
		name  string
		proto corev1.Protocol
		port  int32
	}{{"dns", corev1.ProtocolUDP, 53}, {"dns-tcp", corev1.ProtocolTCP, 53}, {"metrics", corev1.ProtocolTCP, 9153}} {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(p.proto), Port: ptr.To(p.port)})
	}
	for i, p := range pods {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("192.0.2.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(p.Spec.NodeName),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name}})
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	saCfg, err := tb.ServiceAccountRestConfig(ctx, ns, "nodedns-handoff")
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(saCfg)
	h := &handoff.Handoff{Client: sa, Namespace: ns, Deployment: "coredns", DaemonSet: "nodedns", Service: "kube-dns", Replicas: 5, Keep: 1,
		Poll: 100 * time.Millisecond, Settle: 500 * time.Millisecond, Converge: 10 * time.Second, Logf: t.Logf}
	replicas := func() (int32, string) {
		t.Helper()
		d, err := c.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas, d.Annotations[handoff.ReplicasAnnotation]
	}

	// One pod not ready: the Deployment stays.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	err = h.ScaleDown(short)
	cancelShort()
	if err == nil {
		t.Fatal("scale-down with a pod not ready succeeded")
	}
	if n, a := replicas(); n != 2 || a != "" {
		t.Errorf("after a failed scale-down: %d replicas, annotation %q; want 2 and none", n, a)
	}
	// Every pod ready: scaled to the 1 kept, 2 recorded.
	setReady(pods[1], true)
	if err := h.ScaleDown(ctx); err != nil {
		t.Fatalf("scale-down: %v", err)
	}
	if n, a := replicas(); n != 1 || a != "2" {
		t.Errorf("after scale-down: %d replicas, annotation %q; want 1 and 2", n, a)
	}
	setDeploymentStatus(1)

	// Restore returns only once the controller reports the replicas
	// available.
	done := make(chan error, 1)
	go func() { done <- h.Restore(ctx) }()
	for {
		if n, _ := replicas(); n == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("restore returned before the replicas were available: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	setDeploymentStatus(2)
	// and, as the slice controller would once they are ready, kube-dns
	// lists one of them: Restore waits for that too.
	cur, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "kube-dns-nodedns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Endpoints = append(cur.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.100"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "coredns-5d78c9869d-abcde"}})
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("restore: %v", err)
	}
	if n, a := replicas(); n != 2 || a != "" {
		t.Errorf("after restore: %d replicas, annotation %q; want 2 and none", n, a)
	}

	// The Role reaches that Deployment only.
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.AppsV1().Deployments(ns).Patch(ctx, "other", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("patch of another Deployment: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets: %v, want Forbidden", err)
	}
	// Read-only beyond that Deployment: no other Service, no writes to
	// nodes or slices.
	if _, err := sa.CoreV1().Services(ns).Get(ctx, "nodedns-fallback", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get another Service: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().Nodes().Delete(ctx, "node-0", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete a node: %v, want Forbidden", err)
	}
	if err := sa.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "kube-dns-nodedns", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete an EndpointSlice: %v, want Forbidden", err)
	}
	// Restore with no Deployment: refused, as the chart's ServiceAccount.
	if err := c.AppsV1().Deployments(ns).Delete(ctx, "coredns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var refusal *handoff.Refusal
	if err := h.Restore(ctx); !errors.As(err, &refusal) {
		t.Errorf("restore without a Deployment: %v, want a refusal", err)
	}
}
