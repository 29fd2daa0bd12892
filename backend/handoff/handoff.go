// Package handoff moves a cluster's DNS between a CoreDNS Deployment and the
// nodedns DaemonSet without a moment in which a node has neither: the Helm
// hooks of the chart run it as `nodedns-backend handoff scale-down` after
// install and upgrade, and `nodedns-backend handoff restore` before
// uninstall.
//
// Both kinds of pods are endpoints of the kube-dns Service at once (on
// kubeadm's Service the nodedns pods carry its k8s-app label and serve its
// target ports), so the handoff is a matter of order: scale the Deployment
// away once every node runs a ready nodedns pod behind the Service, and
// bring it back, available, before the DaemonSet goes. Where the cluster
// differs (the Service does not select nodedns, nodes are left out,
// something else owns the Deployment's replicas) the Deployment stays,
// serving beside nodedns, and the handoff says why (Coexist).
package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ReplicasAnnotation is set on the Deployment when it is scaled down (to
// Keep replicas): the replicas Restore gives it back.
const ReplicasAnnotation = "nodedns.io/coredns-replicas"

// StatusAnnotation is set on the Deployment when ScaleDown leaves it
// serving beside nodedns: why, and what to do. The hook's log says so too,
// but a Job that succeeds is deleted with it. The scale-down removes it.
const StatusAnnotation = "nodedns.io/handoff"

// DefaultPoll is how often the waits read the API server: a rollout or a
// Deployment becoming available takes seconds, and each read is one GET or
// LIST in the release namespace.
const DefaultPoll = 2 * time.Second

// DefaultSettle is how long ScaleDown watches the Deployment after scaling
// it down for something scaling it back up: a cluster-proportional-autoscaler
// polls every 10 s by default, an add-on manager every minute at most.
const DefaultSettle = 30 * time.Second

// DefaultConverge bounds each wait for the DNS Service's endpoints: for a
// nodedns pod on every node before the scale-down, for nodedns pods only
// after it. The EndpointSlice controller follows a pod's readiness within
// a second or so; a minute without is a Service that will not.
const DefaultConverge = time.Minute

// Handoff is one handoff between Deployment and DaemonSet in Namespace.
type Handoff struct {
	// Client talks to the API server; always non-nil.
	Client    kubernetes.Interface
	Namespace string
	// Deployment is the CoreDNS Deployment (kubeadm: coredns).
	Deployment string
	// DaemonSet is nodedns's.
	DaemonSet string
	// Service is the DNS Service whose ClusterIP is the pods' nameserver
	// (kubeadm: kube-dns; RKE2: rke2-coredns-rke2-coredns; kubespray:
	// coredns).
	Service string
	// PodPorts are the node ports on which the nodedns pods serve DNS (the
	// backend's fallback listener, and the frontend's in node-ip mode): a
	// DNS port of Service must target one of them. Empty means 53.
	PodPorts []int32
	// Replicas is what Restore scales a Deployment at 0 to when it carries
	// no ReplicasAnnotation.
	Replicas int32
	// Keep is how many replicas ScaleDown leaves the Deployment (never
	// more than it has): the path of last resort when every nodedns pod is
	// gone without the hooks (docs/fail-open.md). 0 removes CoreDNS.
	// Replicas above Keep after the scale-down are someone else's.
	Keep int32
	// Poll is the waits' period; 0 means DefaultPoll.
	Poll time.Duration
	// Settle is how long after its scale-down the Deployment is watched
	// for replicas coming back; 0 means DefaultSettle.
	Settle time.Duration
	// Converge bounds each wait for the Service's endpoints; 0 means
	// DefaultConverge.
	Converge time.Duration
	// Drain is how long a CoreDNS pod taken out of the Service before the
	// scale-down keeps running once it has left the Service's endpoints
	// (drain.go); 0 means DefaultDrain.
	Drain time.Duration
	// OverrideReconciler scales down a Deployment that an add-on manager
	// or k3s marks as theirs: the operator knows they leave its replicas
	// alone. Autoscalers are still detected and replicas coming back still
	// stop the handoff.
	OverrideReconciler bool
	// AllowNoDNS lets Restore succeed when no Deployment exists or it does
	// not become available: the operator accepts a cluster without DNS.
	AllowNoDNS bool
	// Logf prints one line of progress; always non-nil.
	Logf func(format string, args ...any)
}

// ScaleDown scales the CoreDNS Deployment down to Keep replicas,
// recording its replicas in ReplicasAnnotation in the same write, only
// when that is safe, and otherwise returns a *Coexist saying why, leaving it serving
// beside nodedns. Safe means, in this order:
//   - nothing else sets its replicas: no autoscaler targets it, no
//     reconciler marks it, and nodedns did not scale it down before only
//     for it to come back;
//   - the DaemonSet is rolled out, with every pod ready;
//   - it covers every schedulable Linux node (a partial rollout does not);
//   - the DNS Service selects the nodedns pods, targets their DNS port, and
//     its EndpointSlices list a ready nodedns pod on every such node.
//
// After the scale-down it waits (Converge) until the Service's ready
// endpoints are nodedns pods, still on every node, and at most Keep others
// (the kept replicas), and scales the Deployment back to what it had if
// they are not. Then it watches the Deployment until Settle has passed
// since the scale-down: replicas above Keep that come back belong to
// someone else, and are left as they are.
//
// A Deployment that does not exist is left as it is at once, and so is one
// at or below Keep replicas that nodedns did not scale down. One nodedns
// scaled down already (an upgrade: ReplicasAnnotation, at most Keep
// replicas) is scaled back when the DaemonSet no longer has a pod on every
// schedulable Linux node (keepCoverage), else raised to Keep if it is
// below (an earlier release kept fewer), without waiting for the rollout. The reason for a Coexist is also
// recorded in StatusAnnotation on the Deployment.
func (h *Handoff) ScaleDown(ctx context.Context) error {
	err := h.scaleDown(ctx)
	var co *Coexist
	if errors.As(err, &co) {
		// Best effort: the reason is in the log either way.
		note := map[string]any{"metadata": map[string]any{"annotations": map[string]any{StatusAnnotation: "CoreDNS stays, serving beside nodedns: " + co.Reason}}}
		if perr := h.patch(ctx, note); perr != nil {
			h.Logf("could not record why on the Deployment: %v", perr)
		}
	}
	return err
}

func (h *Handoff) scaleDown(ctx context.Context) error {
	d, err := h.deployment(ctx)
	if err != nil {
		return err
	}
	if d == nil {
		h.Logf("no Deployment %s/%s: nothing to hand off", h.Namespace, h.Deployment)
		return nil
	}
	if err := h.cleanDrained(ctx); err != nil {
		return err
	}
	// At or below Keep already (an upgrade after the install): no rollout
	// to wait for (one of many nodes, one at a time, may take longer than
	// a hook), but an upgrade that leaves nodes out needs CoreDNS back.
	if specReplicas(d) <= h.Keep {
		if rec, ok := d.Annotations[ReplicasAnnotation]; ok {
			if err := h.keepCoverage(ctx, d, rec); err != nil {
				return err
			}
			return h.raiseToKeep(ctx, d, rec)
		}
		h.Logf("Deployment %s/%s is at %d replicas already, at most the %d kept (%s=%q): nothing to scale down", h.Namespace, h.Deployment, specReplicas(d), h.Keep, ReplicasAnnotation, d.Annotations[ReplicasAnnotation])
		return nil
	}
	// Scaled down by an earlier run and running more again: something, or
	// someone, owns its replicas. Doing it again would be a fight.
	if rec, ok := d.Annotations[ReplicasAnnotation]; ok {
		return coexist("Deployment %s/%s was scaled down by nodedns before (%s=%s) and runs %d replicas again, more than the %d it keeps: something owns its replicas (an autoscaler, an add-on manager, GitOps, a person). "+
			"Once it no longer does, remove the annotation and run helm upgrade to hand off again", h.Namespace, h.Deployment, ReplicasAnnotation, rec, specReplicas(d), h.Keep)
	}
	if reason, err := h.owner(ctx, d); err != nil || reason != "" {
		if err != nil {
			return err
		}
		return coexist("%s", reason)
	}
	ds, err := h.waitDaemonSet(ctx)
	if err != nil {
		return err
	}
	nodes, pods, err := h.coverage(ctx, ds)
	if err != nil {
		return err
	}
	svc, err := h.Client.CoreV1().Services(h.Namespace).Get(ctx, h.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return coexist("no Service %s/%s: the pods' nameserver is another Service, whose endpoints nodedns cannot check (the chart value service.name names it)", h.Namespace, h.Service)
	}
	if err != nil {
		return fmt.Errorf("get Service %s/%s: %w", h.Namespace, h.Service, err)
	}
	if reason := h.serviceReason(svc, ds); reason != "" {
		return coexist("%s", reason)
	}
	// The endpoints follow the pods' readiness a moment later.
	var eps *endpoints
	err = h.waitBounded(ctx, func() (bool, error) {
		if pods, err = h.nodednsPods(ctx, ds); err != nil {
			return false, err
		}
		eps, err = h.readEndpoints(ctx, svc, pods)
		return err == nil && len(eps.missing(nodes)) == 0, err
	})
	if errors.Is(err, errBound) {
		return coexist("Service %s/%s has no ready endpoint of a nodedns pod, on all its DNS ports, on %s after %s: those nodes' pods would go unanswered through it once CoreDNS is gone",
			h.Namespace, h.Service, named(eps.missing(nodes)), h.converge())
	}
	if err != nil {
		return err
	}
	// Read again: the waits may have taken minutes.
	if d, err = h.deployment(ctx); err != nil || d == nil {
		if d == nil && err == nil {
			h.Logf("no Deployment %s/%s any more: nothing to hand off", h.Namespace, h.Deployment)
		}
		return err
	}
	replicas := specReplicas(d)
	if replicas <= h.Keep {
		h.Logf("Deployment %s/%s is at %d replicas already, at most the %d kept (%s=%q): nothing to scale down", h.Namespace, h.Deployment, replicas, h.Keep, ReplicasAnnotation, d.Annotations[ReplicasAnnotation])
		return nil
	}
	// The pods beyond Keep leave the Service before the scale-down, and
	// are deleted once kube-proxy has dropped their conntrack entries
	// (drain.go): left is when they were seen gone from the endpoints.
	dr := h.drain(ctx, d, svc)
	var left time.Time
	defer func() { h.finish(ctx, dr, left) }()
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: strconv.Itoa(int(replicas)), StatusAnnotation: nil}},
		"spec":     map[string]any{"replicas": h.Keep},
	}
	if err := h.patch(ctx, patch); err != nil {
		return err
	}
	scaled := time.Now()
	h.Logf("Deployment %s/%s scaled from %d to %d replicas (%s=%d); waiting until Service %s/%s's ready endpoints are nodedns pods and at most %d others", h.Namespace, h.Deployment, replicas, h.Keep, ReplicasAnnotation, replicas, h.Namespace, h.Service, h.Keep)

	// After: the CoreDNS pods beyond Keep leave the endpoints, the nodedns
	// ones stay. Replicas coming back meanwhile are someone else's, not a
	// failure.
	back := int32(0)
	err = h.waitBounded(ctx, func() (bool, error) {
		d, err := h.deployment(ctx)
		if err != nil {
			return false, err
		}
		if d != nil {
			if back = specReplicas(d); back > h.Keep {
				return true, nil
			}
		}
		if pods, err = h.nodednsPods(ctx, ds); err != nil {
			return false, err
		}
		eps, err = h.readEndpoints(ctx, svc, pods)
		return err == nil && len(eps.missing(nodes)) == 0 && len(eps.others) <= int(h.Keep), err
	})
	if back > h.Keep {
		return h.cameBack(back, scaled)
	}
	// Not converged within the bound, or the hook's own time ran out:
	// either way CoreDNS goes back to what it had.
	if errors.Is(err, errBound) || (err != nil && ctx.Err() != nil) {
		var why []string
		if eps != nil {
			if m := eps.missing(nodes); len(m) > 0 {
				why = append(why, "no ready nodedns endpoint on "+named(m))
			}
			if len(eps.others) > int(h.Keep) {
				why = append(why, fmt.Sprintf("ready endpoints that are not nodedns pods (%d, more than the %d kept): %s", len(eps.others), h.Keep, named(eps.others)))
			}
		}
		if !errors.Is(err, errBound) {
			why = append(why, err.Error())
		}
		// Give it back what it had, and drop the record, so that a later
		// upgrade tries again. ctx may be over: the rollback gets its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		rb := map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: nil}},
			"spec":     map[string]any{"replicas": replicas},
		}
		if perr := h.patch(rctx, rb); perr != nil {
			return fmt.Errorf("Service %s/%s did not converge to nodedns pods (%s), and scaling Deployment %s/%s back to %d failed: %w",
				h.Namespace, h.Service, strings.Join(why, "; "), h.Namespace, h.Deployment, replicas, perr)
		}
		h.Logf("Deployment %s/%s scaled back to %d replicas", h.Namespace, h.Deployment, replicas)
		if !errors.Is(err, errBound) {
			return fmt.Errorf("Service %s/%s did not converge to nodedns pods before the hook's time ran out, Deployment %s/%s scaled back to %d replicas: %w",
				h.Namespace, h.Service, h.Namespace, h.Deployment, replicas, err)
		}
		return coexist("%s after the scale-down, Service %s/%s still had %s: Deployment %s/%s scaled back to %d replicas",
			h.converge(), h.Namespace, h.Service, strings.Join(why, "; "), h.Namespace, h.Deployment, replicas)
	}
	if err != nil {
		return err
	}
	left = time.Now()
	h.Logf("Service %s/%s: ready endpoints are nodedns pods on all %d nodes and %d others (at most the %d kept); watching Deployment %s/%s until %s after the scale-down", h.Namespace, h.Service, len(nodes), len(eps.others), h.Keep, h.Namespace, h.Deployment, h.settle())

	// Settle: an autoscaler or reconciler this did not recognise shows
	// itself by scaling the Deployment back up.
	err = h.wait(ctx, func() (bool, error) {
		d, err := h.deployment(ctx)
		if err != nil || d == nil {
			return d == nil, err
		}
		back = specReplicas(d)
		return back > h.Keep || time.Since(scaled) >= h.settle(), nil
	})
	if err != nil {
		return err
	}
	if back > h.Keep {
		return h.cameBack(back, scaled)
	}
	h.Logf("Deployment %s/%s stayed at %d for %s: nodedns serves every node", h.Namespace, h.Deployment, h.Keep, h.settle())
	return nil
}

// cameBack is the Coexist of a Deployment whose replicas came back after
// the scale-down. The annotation stays: the next upgrade sees it and does
// not scale the Deployment down again.
func (h *Handoff) cameBack(replicas int32, scaled time.Time) error {
	return coexist("Deployment %s/%s is back at %d replicas %s after nodedns scaled it to %d: something owns its replicas (an autoscaler, an add-on manager, GitOps, a person), and nodedns does not scale it down again. "+
		"Once it no longer does, remove the annotation %s and run helm upgrade to hand off again",
		h.Namespace, h.Deployment, replicas, time.Since(scaled).Round(time.Second), h.Keep, ReplicasAnnotation)
}

// keepCoverage, for a Deployment nodedns scaled down (rec replicas
// recorded), scales it back when the DaemonSet no longer has a pod, ready
// or not, on some schedulable Linux node: an upgrade's nodeSelector,
// affinity or tolerations left it out. Nodes whose pod is still starting
// (a rollout, a new node) are not counted: it will serve them.
func (h *Handoff) keepCoverage(ctx context.Context, d *appsv1.Deployment, rec string) error {
	var ds *appsv1.DaemonSet
	// The DaemonSet's controller must have seen the upgrade's spec
	// before its pods say which nodes it covers.
	err := h.waitBounded(ctx, func() (bool, error) {
		var err error
		ds, err = h.Client.AppsV1().DaemonSets(h.Namespace).Get(ctx, h.DaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
		}
		return ds.Status.ObservedGeneration >= ds.Generation, nil
	})
	if errors.Is(err, errBound) {
		h.Logf("DaemonSet %s/%s: its controller has not seen generation %d after %s; its coverage is not checked", h.Namespace, h.DaemonSet, ds.Generation, h.converge())
		return nil
	}
	if err != nil {
		return err
	}
	nodes, err := h.schedulableNodes(ctx)
	if err != nil {
		return err
	}
	pods, err := h.listPods(ctx, ds)
	if err != nil {
		return err
	}
	onNode := map[string]string{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			onNode[p.Name] = p.Spec.NodeName
		}
	}
	out := uncovered(nodes, onNode)
	if len(out) == 0 {
		return nil
	}
	n, err := strconv.ParseInt(rec, 10, 32)
	if err != nil || n < 1 {
		n = int64(h.Replicas)
	}
	back := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: nil}},
		"spec":     map[string]any{"replicas": n},
	}
	if err := h.patch(ctx, back); err != nil {
		return fmt.Errorf("DaemonSet %s/%s has no pod on %s, and scaling Deployment %s/%s back to %d failed: %w", h.Namespace, h.DaemonSet, named(out), h.Namespace, h.Deployment, n, err)
	}
	return coexist("DaemonSet %s/%s has no pod on %d of %d schedulable Linux nodes (%s) since this upgrade: Deployment %s/%s scaled back to %d replicas to serve them",
		h.Namespace, h.DaemonSet, len(out), len(nodes), named(out), h.Namespace, h.Deployment, n)
}

// raiseToKeep, for a Deployment nodedns scaled down (rec replicas
// recorded) that runs fewer than Keep (a release that kept fewer, or
// none), scales it up to Keep, never above rec.
func (h *Handoff) raiseToKeep(ctx context.Context, d *appsv1.Deployment, rec string) error {
	have := specReplicas(d)
	want := h.Keep
	if n, err := strconv.ParseInt(rec, 10, 32); err == nil && n >= 1 {
		want = min(want, int32(n))
	}
	if have >= want {
		h.Logf("Deployment %s/%s is at %d replicas already, scaled down by nodedns (%s=%s): nothing to scale down", h.Namespace, h.Deployment, have, ReplicasAnnotation, rec)
		return nil
	}
	if err := h.patch(ctx, map[string]any{"spec": map[string]any{"replicas": want}}); err != nil {
		return err
	}
	h.Logf("Deployment %s/%s scaled down by nodedns before (%s=%s): scaled from %d to the %d kept", h.Namespace, h.Deployment, ReplicasAnnotation, rec, have, want)
	return nil
}

// coverage checks that the DaemonSet, rolled out, runs a ready pod on
// every schedulable Linux node, and returns those nodes and the pods. A
// nodeSelector, affinity or taints leaving nodes out is a Coexist: the
// pods there still need CoreDNS.
func (h *Handoff) coverage(ctx context.Context, ds *appsv1.DaemonSet) ([]string, map[string]string, error) {
	nodes, err := h.schedulableNodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	pods, err := h.nodednsPods(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	if out := uncovered(nodes, pods); len(out) > 0 {
		return nil, nil, coexist("DaemonSet %s/%s runs no ready pod on %d of %d schedulable Linux nodes (%s): its nodeSelector, affinity or tolerations leave them out, and their pods still need CoreDNS",
			h.Namespace, h.DaemonSet, len(out), len(nodes), named(out))
	}
	h.Logf("DaemonSet %s/%s runs a ready pod on each of the %d schedulable Linux nodes", h.Namespace, h.DaemonSet, len(nodes))
	return nodes, pods, nil
}

// Restore scales the Deployment back to the replicas recorded in
// ReplicasAnnotation (Replicas when there is none) and waits until they are
// all updated and available; then it removes the annotation. A Deployment
// that runs replicas already is only waited for. When there is none, or
// it does not become available, Restore refuses (a *Refusal, or the wait's
// error): the uninstall would leave the DNS Service with nothing behind
// it. AllowNoDNS turns that into a warning.
func (h *Handoff) Restore(ctx context.Context) error {
	err := h.restore(ctx)
	if err == nil || !h.AllowNoDNS {
		return err
	}
	h.Logf("WARNING: %v", err)
	h.Logf("WARNING: going ahead (--allow-no-dns): once nodedns is removed, nothing may serve Service %s/%s until a DNS server is deployed", h.Namespace, h.Service)
	return nil
}

func (h *Handoff) restore(ctx context.Context) error {
	d, err := h.deployment(ctx)
	if err != nil {
		return err
	}
	if err := h.cleanDrained(ctx); err != nil {
		return err
	}
	if d == nil {
		return &Refusal{Reason: fmt.Sprintf("no Deployment %s/%s to give the cluster's DNS back to: once nodedns is removed nothing serves Service %s/%s, and every pod's lookups fail. "+
			"Deploy a DNS server behind that Service first (the chart value coreDNS.deployment names its Deployment), "+
			"or accept a cluster without DNS: helm upgrade --reuse-values --set coreDNS.allowUninstallWithoutDNS=true, then helm uninstall",
			h.Namespace, h.Deployment, h.Namespace, h.Service)}
	}
	have := specReplicas(d)
	want := have
	if have == 0 {
		want = h.Replicas
	}
	// The recorded replicas, when it runs fewer (the kept ones): never
	// fewer than it runs.
	if s, ok := d.Annotations[ReplicasAnnotation]; ok {
		n, err := strconv.ParseInt(s, 10, 32)
		switch {
		case err == nil && n >= 1:
			want = max(have, int32(n))
		case have == 0:
			return fmt.Errorf("Deployment %s/%s: annotation %s=%q is not a positive number of replicas: set it, or scale the Deployment yourself", h.Namespace, h.Deployment, ReplicasAnnotation, s)
		default:
			h.Logf("Deployment %s/%s: annotation %s=%q is not a positive number of replicas: it keeps its %d", h.Namespace, h.Deployment, ReplicasAnnotation, s, have)
		}
	}
	if want != have {
		if err := h.patch(ctx, map[string]any{"spec": map[string]any{"replicas": want}}); err != nil {
			return err
		}
		h.Logf("Deployment %s/%s scaled from %d to %d replicas; waiting until they are available", h.Namespace, h.Deployment, have, want)
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
	if err := h.waitListed(ctx); err != nil {
		return err
	}
	if _, ok := d.Annotations[ReplicasAnnotation]; ok {
		if err := h.patch(ctx, map[string]any{"metadata": map[string]any{"annotations": map[string]any{ReplicasAnnotation: nil}}}); err != nil {
			return err
		}
	}
	h.Logf("Deployment %s/%s available with %d replicas: nodedns may go", h.Namespace, h.Deployment, want)
	return nil
}

// waitListed waits (Converge) until the DNS Service's EndpointSlices list
// a ready endpoint that is not a nodedns pod: available pods serve the
// pods' nameserver only once the Service lists them, and nodedns goes next.
// A Service that does not exist is not waited for (nothing to check).
func (h *Handoff) waitListed(ctx context.Context) error {
	svc, err := h.Client.CoreV1().Services(h.Namespace).Get(ctx, h.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		h.Logf("no Service %s/%s: its endpoints are not checked", h.Namespace, h.Service)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Service %s/%s: %w", h.Namespace, h.Service, err)
	}
	pods := map[string]string{}
	if ds, err := h.Client.AppsV1().DaemonSets(h.Namespace).Get(ctx, h.DaemonSet, metav1.GetOptions{}); err == nil {
		if pods, err = h.nodednsPods(ctx, ds); err != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
	}
	var eps *endpoints
	err = h.waitBounded(ctx, func() (bool, error) {
		var err error
		eps, err = h.readEndpoints(ctx, svc, pods)
		return err == nil && len(eps.others) > 0, err
	})
	if errors.Is(err, errBound) {
		return fmt.Errorf("Service %s/%s lists no ready endpoint besides the nodedns pods %s after Deployment %s/%s became available: once nodedns is removed nothing would serve it. "+
			"Check that the Service selects the Deployment's pods (kubectl -n %s get endpointslices -l kubernetes.io/service-name=%s)",
			h.Namespace, h.Service, h.converge(), h.Namespace, h.Deployment, h.Namespace, h.Service)
	}
	if err != nil {
		return err
	}
	h.Logf("Service %s/%s lists %d ready endpoints besides the nodedns pods: %s", h.Namespace, h.Service, len(eps.others), named(eps.others))
	return nil
}

// deployment returns the Deployment, or nil when it does not exist.
func (h *Handoff) deployment(ctx context.Context) (*appsv1.Deployment, error) {
	d, err := h.Client.AppsV1().Deployments(h.Namespace).Get(ctx, h.Deployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
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
// It returns the DaemonSet as last read.
func (h *Handoff) waitDaemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	last := ""
	var ds *appsv1.DaemonSet
	err := h.wait(ctx, func() (bool, error) {
		var err error
		ds, err = h.Client.AppsV1().DaemonSets(h.Namespace).Get(ctx, h.DaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
		}
		pods, err := h.listPods(ctx, ds)
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		total := len(pods)
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
		return nil, fmt.Errorf("DaemonSet %s/%s not ready on every node, the Deployment is left as it is: %w", h.Namespace, h.DaemonSet, err)
	}
	return ds, nil
}

// listPods returns the DaemonSet's pods that are not being deleted.
func (h *Handoff) listPods(ctx context.Context, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s/%s selector: %w", h.Namespace, h.DaemonSet, err)
	}
	list, err := h.Client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of DaemonSet %s/%s: %w", h.Namespace, h.DaemonSet, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, ds) {
			continue
		}
		pods = append(pods, p)
	}
	return pods, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// errBound is waitBounded's error when Converge has passed.
var errBound = errors.New("not within the bound")

// waitBounded is wait, for at most Converge: it returns errBound then
// (ctx's error if ctx ended first).
func (h *Handoff) waitBounded(ctx context.Context, done func() (bool, error)) error {
	bctx, cancel := context.WithTimeout(ctx, h.converge())
	defer cancel()
	err := h.wait(bctx, done)
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		return errBound
	}
	return err
}

func (h *Handoff) converge() time.Duration {
	if h.Converge <= 0 {
		return DefaultConverge
	}
	return h.Converge
}

func (h *Handoff) settle() time.Duration {
	if h.Settle <= 0 {
		return DefaultSettle
	}
	return h.Settle
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
