package kubespec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// EndpointSliceController is the endpointslice.kubernetes.io/managed-by
// value of the slices that kube-controller-manager's EndpointSlice
// controller writes for Services with a selector.
const EndpointSliceController = "endpointslice-controller.k8s.io"

// Selectors returns the label selectors of the two EndpointSlice watches of
// the spec mode, each ANDed with base (the stanza's labels; nil for none).
//
// By the Kubernetes DNS specification (kubernetes/dns
// docs/specification.md, 2.3 to 2.5) the records of ClusterIP and
// ExternalName Services come from the Service alone; only headless
// Services need their endpoints (A/AAAA of the Service and of each
// hostname, SRV targets, PTR of the endpoint addresses). The EndpointSlice
// controller labels the slices of headless Services
// service.kubernetes.io/headless, and kube-proxy watches exactly the
// complement. Slices that other writers make (the mirroring controller,
// users, other controllers) may lack the label whatever their Service is,
// so they are watched too. A selector can only AND its requirements, hence
// two watches:
//
//   - headless: service.kubernetes.io/headless
//   - unlabelled: !service.kubernetes.io/headless,
//     endpointslice.kubernetes.io/managed-by notin (endpointslice-controller.k8s.io)
//
// What neither sees are the EndpointSlice controller's slices of Services
// with a ClusterIP: the slices kube-proxy watches, and most of the churn.
func Selectors(base labels.Selector) (headless, unlabelled labels.Selector, err error) {
	if base == nil {
		base = labels.NewSelector()
	}
	isHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.Exists, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("headless requirement: %w", err)
	}
	notHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("not-headless requirement: %w", err)
	}
	notController, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.NotIn, []string{EndpointSliceController})
	if err != nil {
		return nil, nil, fmt.Errorf("managed-by requirement: %w", err)
	}
	return base.Add(*isHeadless), base.Add(*notHeadless, *notController), nil
}
