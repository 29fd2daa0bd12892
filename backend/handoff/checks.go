package handoff

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Coexist is ScaleDown's answer when the CoreDNS Deployment must stay:
// removing it is not known to be safe, or something else owns its
// replicas. It is not a failure: CoreDNS and nodedns both serve behind
// the DNS Service, and Main exits 0 after logging Reason.
type Coexist struct {
	// Reason says why, and what the operator can do about it.
	Reason string
}

func (c *Coexist) Error() string { return "CoreDNS stays beside nodedns: " + c.Reason }

func coexist(format string, args ...any) error {
	return &Coexist{Reason: fmt.Sprintf(format, args...)}
}

// Refusal is Restore's answer when an uninstall would leave the DNS
// Service with nothing behind it. Main exits with RefusalExitCode, which
// the pre-delete Job's podFailurePolicy turns into an immediate failure
// (no retries: the answer would be the same).
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

// RefusalExitCode is Main's exit code for a Refusal.
const RefusalExitCode = 3

// Labels and annotations by which a reconciler marks the objects it
// re-applies.
const (
	// The add-on manager (kube-addon-manager, GKE's) re-applies objects
	// labelled Reconcile from its manifests.
	addonManagerLabel = "addonmanager.kubernetes.io/mode"
	// k3s's deploy controller (wrangler's apply) marks what it applies from
	// its packaged manifests, which it rewrites and applies at every start:
	// a label with the hash of its owner, the Addon, and annotations
	// naming that owner (owner-gvk "k3s.cattle.io/v1, Kind=Addon").
	k3sHashLabel       = "objectset.rio.cattle.io/hash"
	k3sOwnerAnnotation = "objectset.rio.cattle.io/owner-gvk"
)

// maxNamed is how many nodes or pods a message names before "and N more".
const maxNamed = 5

// named lists up to maxNamed of names, sorted, with the count of the rest.
func named(names []string) string {
	names = slices.Clone(names)
	sort.Strings(names)
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}

// owner returns why something other than this handoff sets the
// Deployment's replicas, and how the operator hands them over, or "". A
// cluster-proportional-autoscaler scales it at its next poll; an add-on
// manager or k3s re-applies its manifest. Scaling against either is a
// fight whose losers are the cluster's lookups.
func (h *Handoff) owner(ctx context.Context, d *appsv1.Deployment) (string, error) {
	if !h.OverrideReconciler {
		if d.Labels[addonManagerLabel] == "Reconcile" {
			return fmt.Sprintf("Deployment %s/%s is labelled %s=Reconcile: an add-on manager re-applies it from its manifest. "+
				"Where that manifest leaves replicas out (upstream's and GKE's do, so that an autoscaler may set them), scale its autoscaler to 0 first, "+
				"then set the chart value coreDNS.overrideReconciler=true and run helm upgrade", h.Namespace, h.Deployment, addonManagerLabel), nil
		}
		if mark := k3sMark(d); mark != "" {
			return fmt.Sprintf("Deployment %s/%s carries %s: k3s applies it from its packaged manifest, again at every k3s start. "+
				"Its manifest sets no replicas: to hand off, set the chart value coreDNS.overrideReconciler=true and run helm upgrade",
				h.Namespace, h.Deployment, mark), nil
		}
	}
	list, err := h.Client.AppsV1().Deployments(h.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list Deployments in %s (to find an autoscaler of %s): %w", h.Namespace, h.Deployment, err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		if a.Name == h.Deployment {
			continue
		}
		target := autoscalerTarget(a)
		if target == "" || !targetsDeployment(target, h.Deployment) {
			continue
		}
		if specReplicas(a) == 0 {
			h.Logf("Deployment %s/%s (--target=%s) is at 0 replicas: it scales nothing", h.Namespace, a.Name, target)
			continue
		}
		return fmt.Sprintf("Deployment %s/%s autoscales it (--target=%s) and would scale it back up at its next poll. "+
			"To hand off, scale the autoscaler to 0 first (kubectl -n %s scale deployment %s --replicas=0; where a reconciler owns the autoscaler too, "+
			"as on managed clusters, that is its own setting), then run helm upgrade", h.Namespace, a.Name, target, h.Namespace, a.Name), nil
	}
	return "", nil
}

// k3sMark names what marks d as applied by k3s's deploy controller, or
// "". The objects it applies carry the label objectset.rio.cattle.io/hash
// (on k3s's own Deployment, beside its annotations naming the Addon);
// the annotation alone is taken too, as older handoffs did.
func k3sMark(d *appsv1.Deployment) string {
	if _, ok := d.Labels[k3sHashLabel]; ok {
		return "the label " + k3sHashLabel
	}
	if gvk := d.Annotations[k3sOwnerAnnotation]; strings.HasPrefix(gvk, "k3s.cattle.io/") {
		return fmt.Sprintf("the annotation %s=%q", k3sOwnerAnnotation, gvk)
	}
	if _, ok := d.Annotations[k3sHashLabel]; ok {
		return "the annotation " + k3sHashLabel
	}
	return ""
}

// autoscalerTarget returns the value of a --target flag of any container
// of d (cluster-proportional-autoscaler's: kind/name), or "".
func autoscalerTarget(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--target="); ok {
				return v
			}
			if a == "--target" && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// targetsDeployment: the autoscaler's kind/name target is the Deployment
// name. The kind is matched as the autoscaler does, case-insensitively
// (kubespray writes Deployment/coredns, others deployment/coredns).
func targetsDeployment(target, name string) bool {
	kind, n, ok := strings.Cut(target, "/")
	if !ok || n != name {
		return false
	}
	kind = strings.ToLower(kind)
	return kind == "deployment" || kind == "deployments" || strings.HasPrefix(kind, "deployment.")
}

// schedulableNodes returns the names of the nodes that run pods: Ready,
// not cordoned, Linux. Those are the nodes nodedns must serve before
// CoreDNS can go.
func (h *Handoff) schedulableNodes(ctx context.Context) ([]string, error) {
	list, err := h.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: corev1.LabelOSStable + "=linux"})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var names []string
	for i := range list.Items {
		n := &list.Items[i]
		if n.Spec.Unschedulable {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				names = append(names, n.Name)
				break
			}
		}
	}
	return names, nil
}

// nodednsPods returns the DaemonSet's ready pods (not being deleted) by
// name, each with its node.
func (h *Handoff) nodednsPods(ctx context.Context, ds *appsv1.DaemonSet) (map[string]string, error) {
	pods, err := h.listPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, p := range pods {
		if podReady(p) && p.Spec.NodeName != "" {
			m[p.Name] = p.Spec.NodeName
		}
	}
	return m, nil
}

// uncovered returns the nodes without a ready nodedns pod.
func uncovered(nodes []string, pods map[string]string) []string {
	has := map[string]bool{}
	for _, n := range pods {
		has[n] = true
	}
	var out []string
	for _, n := range nodes {
		if !has[n] {
			out = append(out, n)
		}
	}
	return out
}

// dnsPorts returns the DNS Service's ports that serve DNS: port 53, by
// protocol. Its other ports (kubeadm's metrics on 9153) are no one's
// nameserver.
func dnsPorts(svc *corev1.Service) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		if p.Port == 53 {
			out = append(out, p)
		}
	}
	return out
}

// serviceReason returns why the Service's endpoints cannot include the
// nodedns pods, whose labels and containers are the DaemonSet's template,
// or "": its selector wants labels the pods lack, or a DNS port's target
// is not a port on which they serve DNS (PodPorts).
func (h *Handoff) serviceReason(svc *corev1.Service, ds *appsv1.DaemonSet) string {
	name := h.Namespace + "/" + svc.Name
	if len(svc.Spec.Selector) == 0 {
		return fmt.Sprintf("Service %s has no selector: its endpoints are kept by something else, and the nodedns pods are not among them unless it adds them", name)
	}
	labels := ds.Spec.Template.Labels
	var lack, differ []string
	for _, k := range slices.Sorted(maps.Keys(svc.Spec.Selector)) {
		v, ok := labels[k]
		switch {
		case !ok:
			lack = append(lack, k+"="+svc.Spec.Selector[k])
		case v != svc.Spec.Selector[k]:
			differ = append(differ, fmt.Sprintf("%s=%s (theirs: %s)", k, svc.Spec.Selector[k], v))
		}
	}
	if len(lack)+len(differ) > 0 {
		var parts []string
		if len(lack) > 0 {
			parts = append(parts, "the nodedns pods lack "+strings.Join(lack, ", "))
		}
		if len(differ) > 0 {
			parts = append(parts, "they have other values for "+strings.Join(differ, ", "))
		}
		return fmt.Sprintf("Service %s selects %s, but %s: it would have no endpoints once CoreDNS is gone. "+
			"Add those labels to the nodedns pods (the chart values customLabels, k8sAppLabelOverride) or point the chart at the Service they match (service.name)",
			name, selectorString(svc.Spec.Selector), strings.Join(parts, "; "))
	}
	ports := dnsPorts(svc)
	if len(ports) == 0 {
		return fmt.Sprintf("Service %s has no port 53: it is not a DNS Service (the chart value service.name names it)", name)
	}
	for _, p := range ports {
		target := p.TargetPort
		if target.Type == intstr.String && target.StrVal != "" {
			if n, ok := declaredPort(ds, target.StrVal, p.Protocol); !ok {
				return fmt.Sprintf("Service %s port %s (53/%s) targets the port name %q, which the nodedns pods do not declare (hostNetwork pods declare none): its endpoint slices leave them out. "+
					"Set that port's targetPort to %d", name, p.Name, p.Protocol, target.StrVal, h.podPorts()[0])
			} else {
				target = intstr.FromInt32(n)
			}
		}
		port := target.IntVal
		if target.Type == intstr.Int && port == 0 {
			port = p.Port // no targetPort: the port itself
		}
		if !slices.Contains(h.podPorts(), port) {
			return fmt.Sprintf("Service %s port %s (53/%s) targets port %d, but the nodedns pods serve DNS on their node's port %s: traffic sent to them there would go unanswered. "+
				"Set that port's targetPort to %d, or the chart value backend.fallbackPort to %d", name, p.Name, p.Protocol, port, portList(h.podPorts()), h.podPorts()[0], port)
		}
	}
	return ""
}

// declaredPort returns the number of the container port named name with
// protocol proto in the DaemonSet's pod template.
func declaredPort(ds *appsv1.DaemonSet, name string, proto corev1.Protocol) (int32, bool) {
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			pp := p.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if p.Name == name && pp == proto {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// endpoints is what the DNS Service's EndpointSlices say of its ready
// endpoints serving every DNS port: the nodes whose nodedns pod is one,
// and the ready endpoints that are not nodedns pods.
type endpoints struct {
	covered map[string]bool
	others  []string
}

// readEndpoints reads the Service's EndpointSlices. pods are the ready
// nodedns pods by name, with their nodes.
func (h *Handoff) readEndpoints(ctx context.Context, svc *corev1.Service, pods map[string]string) (*endpoints, error) {
	list, err := h.Client.DiscoveryV1().EndpointSlices(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of Service %s/%s: %w", h.Namespace, svc.Name, err)
	}
	want := dnsPorts(svc)
	e := &endpoints{covered: map[string]bool{}}
	// A dual-stack Service has a slice per address family, each naming
	// the same pods: a pod is one endpoint however many slices list it.
	seen := map[string]bool{}
	for i := range list.Items {
		s := &list.Items[i]
		// An endpoint serves the Service's DNS ports only when its slice
		// lists them all (the slice controller groups endpoints by the
		// ports their targetPorts resolve to).
		all := true
		for _, p := range want {
			if !slices.ContainsFunc(s.Ports, func(sp discoveryv1.EndpointPort) bool {
				return ptrOr(sp.Name, "") == p.Name && ptrOr(sp.Protocol, corev1.ProtocolTCP) == p.Protocol && sp.Port != nil
			}) {
				all = false
			}
		}
		for _, ep := range s.Endpoints {
			// Ready nil is "unknown", which consumers take as ready.
			if !ptrOr(ep.Conditions.Ready, true) {
				continue
			}
			var node string
			isPod := ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Namespace == h.Namespace
			if isPod {
				node = pods[ep.TargetRef.Name]
			}
			if node == "" {
				who := strings.Join(ep.Addresses, ",")
				if ep.TargetRef != nil {
					who = ep.TargetRef.Kind + " " + ep.TargetRef.Name
				}
				if !seen[who] {
					seen[who] = true
					e.others = append(e.others, who)
				}
				continue
			}
			if all {
				e.covered[node] = true
			}
		}
	}
	return e, nil
}

// missing returns the nodes whose nodedns pod is not a ready endpoint.
func (e *endpoints) missing(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		if !e.covered[n] {
			out = append(out, n)
		}
	}
	return out
}

func selectorString(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

func portList(ports []int32) string {
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprint(p))
	}
	return strings.Join(s, " or ")
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func (h *Handoff) podPorts() []int32 {
	if len(h.PodPorts) == 0 {
		return []int32{53}
	}
	return h.PodPorts
}
