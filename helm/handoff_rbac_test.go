package helm

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodedns/nodedns/backend/handoff"
)

// TestHandoffRoleIsWhatItReads runs the handoff's scale-down and restore
// against a fake API holding a served cluster (one node, its ready nodedns
// pod, kube-dns's slice, CoreDNS) and compares the requests it makes with
// the Role and ClusterRole the chart renders for it: every request is
// granted (resourceNames included), and every verb of every rule is used,
// so the roles hold nothing the handoff does not read or write. Pods are
// listed with the DaemonSet's and the Deployment's selectors, and CoreDNS's
// pods patched and deleted: RBAC cannot narrow a list or a pod's name to
// a label selector, so the Role's pod verbs cover the namespace's pods
// (docs/security.md).
func TestHandoffRoleIsWhatItReads(t *testing.T) {
	_, objs, _ := render(t, "")
	var role *rbacv1.Role
	var cluster *rbacv1.ClusterRole
	var ds *appsv1.DaemonSet
	var svc *corev1.Service
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *rbacv1.Role:
			if v.Name == "nodedns-handoff" {
				role = v
			}
		case *rbacv1.ClusterRole:
			if v.Name == "nodedns-handoff" {
				cluster = v
			}
		case *appsv1.DaemonSet:
			ds = v
		case *corev1.Service:
			if v.Name == "kube-dns" {
				svc = v
			}
		}
	}
	if role == nil || cluster == nil || ds == nil || svc == nil {
		t.Fatalf("rendering lacks the handoff's roles, the DaemonSet or kube-dns: %v %v %v %v", role, cluster, ds, svc)
	}
	ns := ds.Namespace
	ds = ds.DeepCopy()
	ds.UID = "ds-uid"
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1, NumberReady: 1}
	svc = svc.DeepCopy()
	svc.Spec.ClusterIP = "10.96.0.10"
	// kubeadm's selector, which CoreDNS's pods and the nodedns pods match.
	svc.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", Labels: map[string]string{corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nodedns-0", Namespace: ns, Labels: ds.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "node-0"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName: ptr.To("node-0"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name}}}}
	for _, p := range svc.Spec.Ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.TargetPort.IntVal)})
	}
	coredns := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	// CoreDNS's pod, which the scale-down takes out of the Service and
	// deletes (its ReplicaSet's release is not simulated: the handoff
	// waits Converge for it).
	corePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-0", Namespace: ns, Labels: map[string]string{"k8s-app": "kube-dns", "pod-template-hash": "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "coredns-1", UID: "rs-uid", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	c := fake.NewClientset([]runtime.Object{ds, svc, node, pod, es, coredns, corePod}...)
	// Restore waits for the replicas; the fake has no controller. Only its
	// patch (replicas back above 0) gets a status: a scale-down's would
	// race with the patch itself.
	c.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.PatchAction); !ok || strings.Contains(string(p.GetPatch()), `"replicas":0`) {
			return false, nil, nil
		}
		go func() {
			time.Sleep(20 * time.Millisecond)
			o, err := c.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), ns, "coredns")
			if err != nil {
				return
			}
			d := o.(*appsv1.Deployment).DeepCopy()
			r := *d.Spec.Replicas
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r}
			_ = c.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), d, ns)
			// and, as the EndpointSlice controller would, CoreDNS's pod
			// behind the Service: restore waits for it.
			o, err = c.Tracker().Get(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), ns, es.Name)
			if err != nil {
				return
			}
			e := o.(*discoveryv1.EndpointSlice).DeepCopy()
			e.Endpoints = append(e.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				NodeName: ptr.To("node-0"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "coredns-0"}})
			_ = c.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), e, ns)
		}()
		return false, nil, nil
	})
	h := &handoff.Handoff{Client: c, Namespace: ns, Deployment: "coredns", DaemonSet: ds.Name, Service: "kube-dns", Replicas: 2,
		PodPorts: []int32{53}, Poll: 5 * time.Millisecond, Settle: 50 * time.Millisecond, Converge: time.Second, Drain: 10 * time.Millisecond, Logf: t.Logf}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ScaleDown(ctx); err != nil {
		t.Fatalf("scale-down: %v", err)
	}
	if d, _ := c.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{}); *d.Spec.Replicas != 0 {
		t.Fatalf("scale-down left %d replicas", *d.Spec.Replicas)
	}
	if err := h.Restore(ctx); err != nil {
		t.Fatalf("restore: %v", err)
	}

	type grant struct{ group, resource, verb string }
	used := map[grant]bool{}
	var denied []string
	allowed := func(rules []rbacv1.PolicyRule, g grant, name string) (grant, bool) {
		for _, r := range rules {
			if slices.Contains(r.APIGroups, g.group) && slices.Contains(r.Resources, g.resource) && slices.Contains(r.Verbs, g.verb) &&
				(len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))) {
				return g, true
			}
		}
		return g, false
	}
	var calls []string
	for _, a := range c.Actions() {
		gvr := a.GetResource()
		g := grant{gvr.Group, gvr.Resource, a.GetVerb()}
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		rules := role.Rules
		if a.GetNamespace() == "" {
			rules = cluster.Rules
		} else if a.GetNamespace() != ns {
			denied = append(denied, fmt.Sprintf("%s %s in namespace %s", g.verb, g.resource, a.GetNamespace()))
			continue
		}
		calls = append(calls, fmt.Sprintf("%s %s/%s %s", g.verb, g.group, g.resource, name))
		if _, ok := allowed(rules, g, name); ok {
			used[g] = true
		} else {
			denied = append(denied, fmt.Sprintf("%s %s/%s %q", g.verb, g.group, g.resource, name))
		}
	}
	sort.Strings(calls)
	t.Logf("the handoff's requests: %s", strings.Join(slices.Compact(calls), "; "))
	if len(denied) > 0 {
		t.Errorf("requests the chart's roles do not grant: %v", denied)
	}
	for _, rules := range [][]rbacv1.PolicyRule{role.Rules, cluster.Rules} {
		for _, r := range rules {
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if !used[grant{group, res, v}] {
							t.Errorf("the roles grant %s on %s/%s, which neither scale-down nor restore uses", v, group, res)
						}
					}
				}
			}
		}
	}
}
