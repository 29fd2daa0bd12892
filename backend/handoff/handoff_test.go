package handoff

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
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

// daemonSet is nodedns's DaemonSet on nodes nodes with ready of its pods
// ready (and all of them updated and available when ready == nodes).
func daemonSet(nodes, ready int) []runtime.Object {
	sel := map[string]string{"app.kubernetes.io/instance": "nodedns"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "nodedns", Namespace: ns, UID: "ds-uid", Generation: 1},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}},
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
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodedns-%d", i), Namespace: ns, Labels: sel,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "nodedns", UID: "ds-uid", Controller: &yes}}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
		})
	}
	return objs
}

func newHandoff(t *testing.T, objs ...runtime.Object) (*Handoff, *fake.Clientset, *strings.Builder) {
	c := fake.NewClientset(objs...)
	var log strings.Builder
	return &Handoff{Client: c, Namespace: ns, Deployment: "coredns", DaemonSet: "nodedns", Replicas: 2,
		Poll: 10 * time.Millisecond, Logf: func(f string, a ...any) { fmt.Fprintf(&log, f+"\n", a...) }}, c, &log
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
		{"every pod ready", append(daemonSet(2, 2), deployment(2, "", 2)), nil, 0, "2", "scaled from 2 to 0 replicas"},
		{"three replicas recorded", append(daemonSet(1, 1), deployment(3, "", 3)), nil, 0, "3", "scaled from 3 to 0"},
		{"one pod not ready", append(daemonSet(2, 1), deployment(2, "", 2)), context.DeadlineExceeded, 2, "", "1 of 2 pods ready"},
		{"no node", append(daemonSet(0, 0), deployment(2, "", 2)), context.DeadlineExceeded, 2, "", "0 nodes"},
		{"no DaemonSet", []runtime.Object{deployment(2, "", 2)}, errNotFound, 2, "", ""},
		{"at 0 already", append(daemonSet(2, 2), deployment(0, "2", 0)), nil, 0, "2", "nothing to scale down"},
		{"at 0 already, rollout under way", append(daemonSet(2, 1), deployment(0, "2", 0)), nil, 0, "2", "nothing to scale down"},
		{"no Deployment", daemonSet(2, 2), nil, -1, "", "nothing to hand off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := newHandoff(t, tc.objs...)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
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
		{"no Deployment", nil, nil, -1, ""},
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
)

func matches(err, want error) bool {
	switch want {
	case nil:
		return err == nil
	case errNotFound:
		return apierrors.IsNotFound(errors.Unwrap(err)) || (err != nil && strings.Contains(err.Error(), "not found"))
	case errBadAnnotation:
		return err != nil && strings.Contains(err.Error(), want.Error())
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
	for _, args := range [][]string{nil, {"adopt"}, {"restore", "--replicas=0"}, {"scale-down", "extra"}, {"restore", "--timeout=-1s"}, {"scale-down", "--nope"}} {
		var out strings.Builder
		if code := Main(args, &out); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, out.String())
		}
	}
}
