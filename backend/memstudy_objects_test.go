package main

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/testbed"
)

// memCreateWorkers is the number of concurrent creates: one API server on
// two shared cores takes about 100-200 objects/s with it, past which more
// workers only queue.
const memCreateWorkers = 48

// memHeadless says whether Service i of the study is headless: one in
// headlessEvery.
func memHeadless(i, headlessEvery int) bool {
	return headlessEvery > 0 && i%headlessEvery == 0
}

// createStudyServices creates Services svc-<from>..svc-<to-1> in ns, every
// headlessEvery-th headless, each with a selector and one EndpointSlice of
// endpoints ready endpoints written as kube-controller-manager's
// EndpointSlice controller writes it: the managed-by label of that
// controller (so the backend's spec watch leaves ClusterIP Services' slices
// out, as it does on a real cluster), the Service's labels, the headless
// label, the owner reference, the trigger-time annotation, and per endpoint
// a Pod targetRef, nodeName, zone and the three conditions.
func createStudyServices(ctx context.Context, c kubernetes.Interface, ns string, from, to, endpoints, headlessEvery int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(memCreateWorkers)
	for i := from; i < to; i++ {
		g.Go(func() error {
			name := fmt.Sprintf("svc-%d", i)
			headless := memHeadless(i, headlessEvery)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": name},
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
				},
			}
			if headless {
				svc.Spec.ClusterIP = corev1.ClusterIPNone
			}
			svc, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Service %s/%s: %w", ns, name, err)
			}
			slice := controllerSlice(svc, name+"-x7k2p", headless, endpoints, i)
			if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create EndpointSlice %s/%s: %w", ns, slice.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// memZones spreads endpoints over three zones, as a three-zone cluster has.
var memZones = []string{"zone-a", "zone-b", "zone-c"}

// controllerSlice is the EndpointSlice the EndpointSlice controller writes
// for Service number i (svc, as created, with its UID).
func controllerSlice(svc *corev1.Service, name string, headless bool, endpoints, i int) *discoveryv1.EndpointSlice {
	portName, port, proto := "http", int32(8080), corev1.ProtocolTCP
	yes, no := true, false
	labels := map[string]string{
		"app":                        svc.Name,
		discoveryv1.LabelServiceName: svc.Name,
		discoveryv1.LabelManagedBy:   kubespec.EndpointSliceController,
	}
	if headless {
		labels[corev1.IsHeadlessService] = ""
	}
	eps := make([]discoveryv1.Endpoint, endpoints)
	for j := range eps {
		n := i*endpoints + j
		node := fmt.Sprintf("node-%03d", n%100)
		zone := memZones[n%len(memZones)]
		eps[j] = discoveryv1.Endpoint{
			Addresses:  []string{testbed.ServiceEndpointIP(i, j, endpoints).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: svc.Namespace,
				Name: fmt.Sprintf("%s-6f7d8c9b5d-%05x", svc.Name, n&0xfffff),
				UID:  types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", n, n>>8&0xffff, n&0xfff, n>>4&0xfff, n*7919)),
			},
			NodeName: &node,
			Zone:     &zone,
		}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: svc.Namespace, Labels: labels,
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
}
