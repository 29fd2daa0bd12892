// Package handoff moves a cluster's DNS between a CoreDNS Deployment and the
// nodedns DaemonSet without a moment in which a node has neither: the Helm
// hooks of the chart run it as `nodedns-backend handoff scale-down` after
// install and upgrade, and `nodedns-backend handoff restore` before
// uninstall.
//
// Both kinds of pods are endpoints of the kube-dns Service at once (the
// nodedns pods carry its k8s-app label and serve its target ports), so
// the handoff is only a matter of order: scale the Deployment away once
// every node runs a ready nodedns pod, and bring it back, available,
// before the DaemonSet goes.
package handoff

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ReplicasAnnotation is set on the Deployment when it is scaled to 0: the
// replicas Restore gives it back.
const ReplicasAnnotation = "nodedns.io/coredns-replicas"

// DefaultPoll is how often the waits read the API server: a rollout or a
// Deployment becoming available takes seconds, and each read is one GET or
// LIST in the release namespace.
const DefaultPoll = 2 * time.Second

// Handoff is one handoff between Deployment and DaemonSet in Namespace.
type Handoff struct {
	// Client talks to the API server; always non-nil.
	Client    kubernetes.Interface
	Namespace string
	// Deployment is the CoreDNS Deployment (kubeadm: coredns).
	Deployment string
	// DaemonSet is nodedns's.
	DaemonSet string
	// Replicas is what Restore scales a Deployment at 0 to when it carries
	// no ReplicasAnnotation.
	Replicas int32
	// Poll is the waits' period; 0 means DefaultPoll.
	Poll time.Duration
	// Logf prints one line of progress; always non-nil.
	Logf func(format string, args ...any)
}

// ScaleDown waits until the DaemonSet is rolled out with every pod ready,
// then scales the Deployment to 0 replicas, recording its replicas in
// ReplicasAnnotation in the same write. A Deployment that does not exist,
// or is at 0 already, is left as it is at once, without waiting.
func (h *Handoff) ScaleDown(ctx context.Context) error {
	d, err := h.deployment(ctx)
	if err != nil || d == nil {
		return err
	}
	// At 0 already (an upgrade after the install): nothing to wait for. A
	// rollout of many nodes, one at a time, may take longer than a hook.
	if specReplicas(d) == 0 {
		h.Logf("Deployment %s/%s is at 0 replicas already (%s=%q): nothing to scale down", h.Namespace, h.Deployment, ReplicasAnnotation, d.Annotations[ReplicasAnnotation])
		return nil
	}
	if err := h.waitDaemonSet(ctx); err != nil {
		return err
	}
	// Read again: the wait may have taken minutes.
	if d, err = h.deployment(ctx); err != nil || d == nil {
		return err
	}
	replicas := specReplicas(d)
	if replicas == 0 {
		h.Logf("Deployment %s/%s is at 0 replicas already (%s=%q): nothing to scale down", h.Namespace, h.Deployment, ReplicasAnnotation, d.Annotations[ReplicasAnnotation])
		return nil
	}
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: strconv.Itoa(int(replicas))}},
		"spec":     map[string]any{"replicas": 0},
	}
	if err := h.patch(ctx, patch); err != nil {
		return err
	}
	h.Logf("Deployment %s/%s scaled from %d to 0 replicas (%s=%d); nodedns serves every node", h.Namespace, h.Deployment, replicas, ReplicasAnnotation, replicas)
	return nil
}

// Restore scales the Deployment back to the replicas recorded in
// ReplicasAnnotation (Replicas when there is none) and waits until they are
// all updated and available; then it removes the annotation. A Deployment
// that runs replicas already is only waited for. One that does not exist is
// reported and left: nothing can be restored.
func (h *Handoff) Restore(ctx context.Context) error {
	d, err := h.deployment(ctx)
	if err != nil {
		return err
	}
	if d == nil {
		h.Logf("WARNING: nothing to restore: once nodedns is removed, nothing serves the kube-dns Service until a DNS server is deployed")
		return nil
	}
	want := specReplicas(d)
	if want == 0 {
		want = h.Replicas
		if s, ok := d.Annotations[ReplicasAnnotation]; ok {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil || n < 1 {
				return fmt.Errorf("Deployment %s/%s: annotation %s=%q is not a positive number of replicas: set it, or scale the Deployment yourself", h.Namespace, h.Deployment, ReplicasAnnotation, s)
			}
			want = int32(n)
		}
		if err := h.patch(ctx, map[string]any{"spec": map[string]any{"replicas": want}}); err != nil {
			return err
		}
		h.Logf("Deployment %s/%s scaled from 0 to %d replicas; waiting until they are available", h.Namespace, h.Deployment, want)
	} else {
		h.Logf("Deployment %s/%s has %d replicas; waiting until they are available", h.Namespace, h.Deployment, want)
	}
	last := ""
	err = h.wait(ctx, func() (bool, error) {
		d, err := h.Client.AppsV1().Deployments(h.Namespace).Get(ctx, h.Deployment, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get Deployment %s/%s: %w", h.Namespace, h.Deployment, err)
		}
		s := d.Status
		msg := fmt.Sprintf("Deployment %s/%s: %d of %d replicas updated, %d available", h.Namespace, h.Deployment, s.UpdatedReplicas, specReplicas(d), s.AvailableReplicas)
		if msg != last {
			h.Logf("%s", msg)
			last = msg
		}
		n := specReplicas(d)
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == n && s.AvailableReplicas == n && s.Replicas == n, nil
	})
	if err != nil {
		return fmt.Errorf("Deployment %s/%s not available: %w", h.Namespace, h.Deployment, err)
	}
	if _, ok := d.Annotations[ReplicasAnnotation]; ok {
		if err := h.patch(ctx, map[string]any{"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: nil}}}); err != nil {
			return err
		}
	}
	h.Logf("Deployment %s/%s available with %d replicas: nodedns may go", h.Namespace, h.Deployment, want)
	return nil
}

// deployment returns the Deployment, or nil when it does not exist.
func (h *Handoff) deployment(ctx context.Context) (*appsv1.Deployment, error) {
	d, err := h.Client.AppsV1().Deployments(h.Namespace).Get(ctx, h.Deployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		h.Logf("no Deployment %s/%s: nothing to hand off", h.Namespace, h.Deployment)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Deployment %s/%s: %w", h.Namespace, h.Deployment, err)
	}
	return d, nil
}

func (h *Handoff) patch(ctx context.Context, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("patch Deployment %s/%s: %w", h.Namespace, h.Deployment, err)
	}
	if _, err := h.Client.AppsV1().Deployments(h.Namespace).Patch(ctx, h.Deployment, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch Deployment %s/%s with %s: %w", h.Namespace, h.Deployment, data, err)
	}
	return nil
}

// waitDaemonSet waits until the DaemonSet's controller has seen its latest
// spec and every node it wants a pod on runs an updated, available one, and
// its pods (old ones of a rollout included) are exactly those, all ready.
func (h *Handoff) waitDaemonSet(ctx context.Context) error {
	last := ""
	err := h.wait(ctx, func() (bool, error) {
		ds, err := h.Client.AppsV1().DaemonSets(h.Namespace).Get(ctx, h.DaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
		}
		ready, total, err := h.podsReady(ctx, ds)
		if err != nil {
			return false, err
		}
		s := ds.Status
		msg := fmt.Sprintf("DaemonSet %s/%s: %d nodes, %d updated, %d available; %d of %d pods ready", h.Namespace, h.DaemonSet,
			s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable, ready, total)
		if msg != last {
			h.Logf("%s", msg)
			last = msg
		}
		n := s.DesiredNumberScheduled
		// n > 0: a DaemonSet on no node serves no one.
		return s.ObservedGeneration >= ds.Generation && n > 0 && s.UpdatedNumberScheduled == n &&
			s.NumberAvailable == n && s.NumberUnavailable == 0 && total == int(n) && ready == total, nil
	})
	if err != nil {
		return fmt.Errorf("DaemonSet %s/%s not ready on every node, the Deployment is left as it is: %w", h.Namespace, h.DaemonSet, err)
	}
	return nil
}

// podsReady counts the DaemonSet's pods that are not being deleted, and
// those of them that are ready.
func (h *Handoff) podsReady(ctx context.Context, ds *appsv1.DaemonSet) (ready, total int, err error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return 0, 0, fmt.Errorf("DaemonSet %s/%s selector: %w", h.Namespace, h.DaemonSet, err)
	}
	pods, err := h.Client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return 0, 0, fmt.Errorf("list pods of DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, ds) {
			continue
		}
		total++
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, total, nil
}

// wait calls done every Poll until it reports true or an error, or ctx ends.
func (h *Handoff) wait(ctx context.Context, done func() (bool, error)) error {
	poll := h.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func specReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1 // the API server's default
	}
	return *d.Spec.Replicas
}
