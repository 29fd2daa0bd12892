package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// DrainedLabel marks a CoreDNS pod that ScaleDown took out of the DNS
// Service before the scale-down; its value is the Deployment's name.
// ScaleDown deletes the pod once kube-proxy has had time to drop the UDP
// conntrack entries mapped to it, and a later ScaleDown or Restore deletes
// any such pod an interrupted run left.
const DrainedLabel = "nodedns.io/drained-from"

// DefaultDrain is how long a drained CoreDNS pod keeps running after it
// has left the Service's endpoints. kube-proxy drops the UDP conntrack
// entries of an endpoint that no longer serves at its next sync (at most
// a second after the EndpointSlice changes, plus the time its iptables or
// IPVS update takes: seconds on a loaded node); until it has, a client
// whose reused source port matches such an entry still reaches the pod.
const DefaultDrain = 10 * time.Second

// Why the drain: a pod of a Deployment scaled down is deleted at once and
// goes on serving (CoreDNS's lameduck) until its process exits, but it
// stays a serving endpoint (kubelet still reports it ready: kubeadm's
// readiness probe runs every 10 s) until then, and kube-proxy keeps every
// UDP conntrack entry mapped to a serving endpoint. A query whose source
// port matches one of those entries goes to the exited pod and is lost,
// from the exit until kube-proxy has seen the pod unready and dropped the
// entries (2 to 4 s). Taking the pod out of the Service while it still
// answers moves that moment before its exit: kube-proxy drops the entries,
// new queries go to the endpoints left, and the pod is deleted once no
// entry points at it.

// drained is the CoreDNS pods ScaleDown took out of the Service, and when.
type drained struct {
	pods []string
	at   time.Time
}

// drain takes the Deployment's pods beyond Keep out of Service svc before
// the scale-down: it removes the Service's selector labels from them
// (which also releases them from their ReplicaSet) and sets DrainedLabel,
// then waits until their ReplicaSet has let them go, so that the
// scale-down cannot pick a pod that is kept. It keeps the ready pods,
// oldest first. Pods that would still match the Deployment's selector
// without the Service's labels are left as they are (their ReplicaSet
// would keep them): the scale-down then proceeds as without drain. A pod
// drain cannot patch is left too, and said so.
func (h *Handoff) drain(ctx context.Context, d *appsv1.Deployment, svc *corev1.Service) *drained {
	dr := &drained{at: time.Now()}
	if d.Spec.Selector == nil || len(svc.Spec.Selector) == 0 {
		return dr
	}
	dsel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || dsel.Empty() {
		return dr
	}
	list, err := h.Client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: dsel.String()})
	if err != nil {
		h.Logf("list pods of Deployment %s/%s: %v: scaling down without taking them out of Service %s/%s first", h.Namespace, h.Deployment, err, h.Namespace, h.Service)
		return dr
	}
	ssel := labels.SelectorFromSet(svc.Spec.Selector)
	var pods []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		// The Deployment's selector may match other pods (on kubeadm's
		// cluster, the nodedns pods carry k8s-app=kube-dns too): only its
		// ReplicaSets' pods are its, and the Deployment controller names
		// those <deployment>-<pod-template-hash>.
		c := metav1.GetControllerOf(p)
		if c == nil || c.Kind != "ReplicaSet" || c.Name != d.Name+"-"+p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] {
			continue
		}
		if p.DeletionTimestamp == nil && ssel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	if len(pods) <= int(h.Keep) {
		return dr
	}
	// Keep the ready ones, the oldest first: they have served longest.
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		if ra, rb := podReady(a), podReady(b); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, p := range pods[h.Keep:] {
		after := labels.Set{}
		for k, v := range p.Labels {
			if _, ok := svc.Spec.Selector[k]; !ok {
				after[k] = v
			}
		}
		if dsel.Matches(after) {
			h.Logf("Deployment %s/%s's selector does not depend on Service %s/%s's: its pods cannot leave the Service without staying in the Deployment; scaling down without taking them out first", h.Namespace, h.Deployment, h.Namespace, h.Service)
			return dr
		}
		rm := map[string]any{DrainedLabel: h.Deployment}
		for k := range svc.Spec.Selector {
			rm[k] = nil
		}
		patch := map[string]any{"metadata": map[string]any{"labels": rm, "annotations": map[string]any{StatusAnnotation: fmt.Sprintf(
			"taken out of Service %s by nodedns before Deployment %s's scale-down; deleted once kube-proxy has dropped its conntrack entries", h.Service, h.Deployment)}}}
		if err := h.patchPod(ctx, p.Name, patch); err != nil {
			h.Logf("%v: it leaves the Service when the scale-down deletes it", err)
			continue
		}
		dr.pods = append(dr.pods, p.Name)
	}
	dr.at = time.Now()
	if len(dr.pods) == 0 {
		return dr
	}
	h.Logf("Pods %v of Deployment %s/%s taken out of Service %s/%s before the scale-down (%s=%s); each is deleted %s after it has left the Service's endpoints",
		dr.pods, h.Namespace, h.Deployment, h.Namespace, h.Service, DrainedLabel, h.Deployment, h.drainTime())
	// Their ReplicaSet lets them go (and starts replacements, which the
	// scale-down removes before they are ready).
	err = h.waitBounded(ctx, func() (bool, error) {
		for _, name := range dr.pods {
			p, err := h.Client.CoreV1().Pods(h.Namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("get pod %s/%s: %w", h.Namespace, name, err)
			}
			if metav1.GetControllerOf(p) != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if errors.Is(err, errBound) {
		h.Logf("Pods %v still owned after %s: scaling down anyway", dr.pods, h.converge())
	}
	return dr
}

// finish deletes the drained pods once DefaultDrain has passed since they
// left the Service (since drain, at the latest, when left is zero).
func (h *Handoff) finish(ctx context.Context, dr *drained, left time.Time) {
	if dr == nil || len(dr.pods) == 0 {
		return
	}
	if left.IsZero() || left.Before(dr.at) {
		left = dr.at
	}
	// ctx may be over (the hook's time): the drain and the deletions get
	// their own, bounded.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.drainTime()+30*time.Second)
	defer cancel()
	if wait := time.Until(left.Add(h.drainTime())); wait > 0 {
		select {
		case <-time.After(wait):
		case <-dctx.Done():
		}
	}
	for _, name := range dr.pods {
		h.deletePod(dctx, name)
	}
}

// cleanDrained deletes the pods an interrupted run drained and left.
func (h *Handoff) cleanDrained(ctx context.Context) error {
	list, err := h.Client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: DrainedLabel + "=" + h.Deployment})
	if err != nil {
		return fmt.Errorf("list pods drained from Deployment %s/%s: %w", h.Namespace, h.Deployment, err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			h.deletePod(ctx, p.Name)
		}
	}
	return nil
}

func (h *Handoff) deletePod(ctx context.Context, name string) {
	err := h.Client.CoreV1().Pods(h.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case err == nil:
		h.Logf("Pod %s/%s (drained from Deployment %s) deleted", h.Namespace, name, h.Deployment)
	case !apierrors.IsNotFound(err):
		h.Logf("delete pod %s/%s (drained from Deployment %s; %s=%s): %v", h.Namespace, name, h.Deployment, DrainedLabel, h.Deployment, err)
	}
}

func (h *Handoff) patchPod(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("patch pod %s/%s: %w", h.Namespace, name, err)
	}
	if _, err := h.Client.CoreV1().Pods(h.Namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("take pod %s/%s out of Service %s/%s: %w", h.Namespace, name, h.Namespace, h.Service, err)
	}
	return nil
}

func (h *Handoff) drainTime() time.Duration {
	if h.Drain <= 0 {
		return DefaultDrain
	}
	return h.Drain
}
