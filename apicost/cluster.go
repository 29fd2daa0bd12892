package apicost

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/testbed"
)

// Namespace holds the study's Services and the churning Deployment's slice.
const Namespace = "apicost"

// backendSA is the ServiceAccount every backend authenticates as, bound to
// the chart's rules for the kubernetes plugin (helm/nodedns ClusterRole).
const backendSA = "nodedns"

// backendRBAC creates the ClusterRole and binding of the nodedns chart's
// backend: list and watch of Services, Namespaces and EndpointSlices.
func backendRBAC(ctx context.Context, c kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nodedns-apicost"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodedns-apicost"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: metav1.NamespaceSystem, Name: backendSA}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding: %w", err)
	}
	return nil
}

// createNodes creates the Node objects node-000.. for n simulated nodes; the
// kube-proxy watch set watches its own Node.
func createNodes(ctx context.Context, c kubernetes.Interface, n int) error {
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   nodeName(i),
			Labels: map[string]string{corev1.LabelHostname: nodeName(i)},
		}}
		if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Node %s: %w", node.Name, err)
		}
	}
	return nil
}

// churner replaces the endpoints of one Deployment-sized EndpointSlice one
// by one, as a rolling update does, and counts the updates that succeeded.
// A paused churner keeps its objects and updates nothing.
type churner struct {
	c         kubernetes.Interface
	service   string      // name of its Service and slice
	writer    sliceWriter // who writes its slice: its labels and contents
	size      int
	nodes     int // endpoints are spread over this many Nodes
	interval  time.Duration
	firstIP   int // endpoint addresses count up from EndpointIP(firstIP)
	paused    atomic.Bool
	updates   atomic.Int64
	failures  atomic.Int64
	lastError atomic.Value // string
}

// Churn Services: the ClusterIP one of the steady-state windows, and the
// headless and selector-less ones of the churn-kind windows.
const (
	churnService         = "churn"
	churnHeadlessService = "churn-headless"
	churnOperatorService = "churn-selectorless"
)

// endpoint is the churner's n-th endpoint.
func (ch *churner) endpoint(n int) discoveryv1.Endpoint {
	ip := testbed.EndpointIP(ch.firstIP + n)
	if ch.writer == byOperator {
		return operatorEndpoint(ip)
	}
	return studyEndpoint(ch.service, ch.firstIP+n, ch.nodes, ip)
}

// run creates the Service and its slice, then updates the slice every
// interval until ctx ends. Failed updates (an API server restart) are
// counted and retried with the next tick.
func (ch *churner) run(ctx context.Context, created chan<- error) {
	svc, err := ch.c.CoreV1().Services(Namespace).Create(ctx, studyService(ch.service, ch.writer), metav1.CreateOptions{})
	if err != nil {
		created <- fmt.Errorf("create Service %s: %w", ch.service, err)
		return
	}
	next := 0
	eps := make([]discoveryv1.Endpoint, ch.size)
	for i := range eps {
		eps[i] = ch.endpoint(next)
		next++
	}
	slice, err := ch.c.DiscoveryV1().EndpointSlices(Namespace).Create(ctx,
		studySlice(svc, ch.service+"-"+suffix(0), ch.writer, eps), metav1.CreateOptions{})
	if err != nil {
		created <- fmt.Errorf("create EndpointSlice of %s: %w", ch.service, err)
		return
	}
	created <- nil
	t := time.NewTicker(ch.interval)
	defer t.Stop()
	for k := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ch.paused.Load() {
			continue
		}
		upd := slice.DeepCopy()
		upd.Endpoints[k%ch.size] = ch.endpoint(next)
		got, err := ch.c.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			ch.failures.Add(1)
			ch.lastError.Store(err.Error())
			if apierrors.IsConflict(err) {
				if cur, gerr := ch.c.DiscoveryV1().EndpointSlices(Namespace).Get(ctx, slice.Name, metav1.GetOptions{}); gerr == nil {
					slice = cur
				}
			}
			continue
		}
		slice = got
		next++
		k++
		ch.updates.Add(1)
	}
}
