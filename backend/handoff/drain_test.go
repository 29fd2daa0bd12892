package handoff

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// corePod is a pod of CoreDNS's ReplicaSet, created age ago.
func corePod(name string, age time.Duration, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"k8s-app": "kube-dns", "pod-template-hash": "abc"},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "coredns-abc", UID: "rs-uid", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// releaseOnRelabel makes the fake do what the ReplicaSet controller does
// when a pod no longer matches its selector: drop its owner reference.
func releaseOnRelabel(c *fake.Clientset) {
	c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.PatchAction).GetName()
		go func() {
			time.Sleep(10 * time.Millisecond)
			o, err := c.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), ns, name)
			if err != nil {
				return
			}
			p := o.(*corev1.Pod).DeepCopy()
			if p.Labels["k8s-app"] == "" {
				p.OwnerReferences = nil
				_ = c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, ns)
			}
		}()
		return false, nil, nil
	})
}

// podActions lists the handoff's writes in order: pod patches and
// deletions, and the Deployment's patches of its replicas.
func podActions(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch {
		case a.GetResource().Resource == "pods" && a.GetVerb() == "patch":
			out = append(out, "patch "+a.(k8stesting.PatchAction).GetName())
		case a.GetResource().Resource == "pods" && a.GetVerb() == "delete":
			out = append(out, "delete "+a.(k8stesting.DeleteAction).GetName())
		case a.GetResource().Resource == "deployments" && a.GetVerb() == "patch" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"replicas"`):
			out = append(out, "scale")
		}
	}
	return out
}

// TestScaleDownDrains: the CoreDNS pods beyond Keep leave the Service
// (the Service's labels removed, DrainedLabel set) before the Deployment
// is scaled down, and are deleted Drain after the Service's endpoints no
// longer list them; the kept pod (ready, oldest) is not touched, nor are
// the nodedns pods, which the Deployment's selector also matches, nor a
// pod of another ReplicaSet with the same labels.
func TestScaleDownDrains(t *testing.T) {
	d := deployment(3, "", 3)
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}
	stranger := corePod("stranger", time.Second, true)
	stranger.OwnerReferences[0].Name = "other-abc"
	objs := cat(daemonSet(2, 2), served(2), []runtime.Object{d, stranger, slice("kube-dns-2", "coredns-old"),
		corePod("coredns-old", time.Hour, true), corePod("coredns-new", time.Minute, true), corePod("coredns-starting", 2*time.Hour, false)})
	h, c, log := newHandoff(t, objs...)
	h.Keep = 1
	h.Drain = 300 * time.Millisecond
	releaseOnRelabel(c)
	start := time.Now()
	if err := h.ScaleDown(context.Background()); err != nil {
		t.Fatalf("ScaleDown: %v\n%s", err, log)
	}
	took := time.Since(start)
	checkDeployment(t, c, 1, "3")
	got := strings.Join(podActions(c), ", ")
	want := "patch coredns-new, patch coredns-starting, scale, delete coredns-new, delete coredns-starting"
	if got != want {
		t.Errorf("writes %q, want %q\n%s", got, want, log)
	}
	if took < h.Drain {
		t.Errorf("ScaleDown returned after %s, before the drain's %s", took, h.Drain)
	}
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" {
			if s := string(p.GetPatch()); !strings.Contains(s, `"k8s-app":null`) || !strings.Contains(s, `"`+DrainedLabel+`":"coredns"`) {
				t.Errorf("patch of %s: %s, want k8s-app removed and %s set", p.GetName(), s, DrainedLabel)
			}
		}
	}
	for _, name := range []string{"coredns-new", "coredns-starting"} {
		if _, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want deleted", name, err)
		}
	}
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), "coredns-old", metav1.GetOptions{})
	if err != nil || p.Labels["k8s-app"] != "kube-dns" {
		t.Errorf("the kept pod: %v, %v", err, p)
	}
}

// TestScaleDownDrainsOnRollback: when the Service does not converge and
// CoreDNS is scaled back, the drained pods are still deleted (their
// ReplicaSet has replaced them).
func TestScaleDownDrainsOnRollback(t *testing.T) {
	d := deployment(2, "", 2)
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}
	// Two CoreDNS endpoints stay listed: more than the one kept.
	objs := cat(daemonSet(1, 1), served(1), []runtime.Object{d, slice("kube-dns-2", "coredns-a", "coredns-b"),
		corePod("coredns-a", time.Hour, true), corePod("coredns-b", time.Minute, true)})
	h, c, log := newHandoff(t, objs...)
	h.Keep = 1
	h.Drain = 10 * time.Millisecond
	releaseOnRelabel(c)
	if err := h.ScaleDown(context.Background()); err == nil {
		t.Fatalf("ScaleDown: nil, want a Coexist (rollback)\n%s", log)
	}
	checkDeployment(t, c, 2, "")
	if got, want := strings.Join(podActions(c), ", "), "patch coredns-b, scale, scale, delete coredns-b"; got != want {
		t.Errorf("writes %q, want %q\n%s", got, want, log)
	}
}

// TestScaleDownDrainSkipped: a Deployment whose selector its pods still
// match without the Service's labels (or with no selector) is scaled down
// without drain: no pod is written.
func TestScaleDownDrainSkipped(t *testing.T) {
	for _, sel := range []map[string]string{nil, {"pod-template-hash": "abc"}} {
		t.Run(fmt.Sprint(sel), func(t *testing.T) {
			d := deployment(2, "", 2)
			if sel != nil {
				d.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
			}
			h, c, log := newHandoff(t, cat(daemonSet(1, 1), served(1), []runtime.Object{d, corePod("coredns-a", time.Hour, true), corePod("coredns-b", time.Minute, true)})...)
			h.Keep = 1
			if err := h.ScaleDown(context.Background()); err != nil {
				t.Fatalf("ScaleDown: %v\n%s", err, log)
			}
			checkDeployment(t, c, 1, "2")
			if got := strings.Join(podActions(c), ", "); got != "scale" {
				t.Errorf("writes %q, want only the scale\n%s", got, log)
			}
		})
	}
}

// TestRestoreDeletesDrained: pods an interrupted scale-down drained and
// left (DrainedLabel) are deleted by the next run.
func TestRestoreDeletesDrained(t *testing.T) {
	left := corePod("coredns-left", time.Hour, true)
	left.Labels = map[string]string{DrainedLabel: "coredns"}
	left.OwnerReferences = nil
	other := corePod("other", time.Hour, true)
	other.Labels = map[string]string{DrainedLabel: "another"}
	h, c, log := newHandoff(t, deployment(2, "", 2), left, other)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.Restore(ctx); err != nil {
		t.Fatalf("Restore: %v\n%s", err, log)
	}
	if got := strings.Join(podActions(c), ", "); got != "delete coredns-left" {
		t.Errorf("writes %q, want the left pod deleted", got)
	}
}
