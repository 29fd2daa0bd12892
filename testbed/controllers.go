package testbed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StartControllers starts kube-controller-manager and kube-scheduler beside
// the API server (host loopback, admin credentials), so that DaemonSets,
// Deployments, ReplicaSets, ServiceAccounts and their tokens, EndpointSlices
// and rollouts are the real controllers' work; and it points the
// "kubernetes" Service at NodeURL, where pods reach the API server (the
// testbed runs kube-apiserver with --endpoint-reconciler-type=none). It
// returns once the default ServiceAccount of the default namespace exists:
// pods are refused before (REALNODE pitfall 8).
func (tb *Testbed) StartControllers(ctx context.Context) error {
	kcm, err := Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := Binary("kube-scheduler")
	if err != nil {
		return err
	}
	if err := tb.writeCAKey(); err != nil {
		return err
	}
	f := func(name string) string { return filepath.Join(tb.Dir, name) }
	procs := []struct {
		name string
		argv []string
	}{
		{"kube-controller-manager", []string{kcm,
			"--kubeconfig=" + tb.Kubeconfig,
			"--leader-elect=false",
			"--secure-port=0", // nothing scrapes it; no port to find
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + f("sa.key"),
			"--root-ca-file=" + f("ca.crt"), // the kube-root-ca.crt ConfigMaps of projected tokens
			"--cluster-signing-cert-file=" + f("ca.crt"),
			"--cluster-signing-key-file=" + f("ca.key"),
			// PodCIDRs are the testbed's (AddRealNode), not allocated.
			"--allocate-node-cidrs=false",
			"--profiling=false",
			"--v=1",
		}},
		{"kube-scheduler", []string{sched,
			"--kubeconfig=" + tb.Kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--profiling=false",
			"--v=1",
		}},
	}
	for _, p := range procs {
		proc, err := StartProcess(tb.Dir, p.name, p.argv, nil)
		if err != nil {
			return err
		}
		tb.mu.Lock()
		stopped := tb.stopped
		if !stopped {
			tb.control = append(tb.control, proc)
		}
		tb.mu.Unlock()
		if stopped {
			return errors.Join(errors.New("start controllers: testbed stopped"), proc.Stop())
		}
	}
	if err := tb.kubernetesEndpoints(ctx); err != nil {
		return err
	}
	tb.mu.Lock()
	kcmProc := tb.control[len(tb.control)-2]
	tb.mu.Unlock()
	err = poll(ctx, kcmProc, "ServiceAccount default/default", func() (bool, error) {
		_, err := tb.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, kcmProc.LogTail())
	}
	return nil
}

// kubernetesEndpoints creates the EndpointSlice of the "kubernetes" Service:
// NodeGateway on the API server's port, reached through the relay.
func (tb *Testbed) kubernetesEndpoints(ctx context.Context) error {
	if _, err := tb.ensureNetwork(ctx); err != nil {
		return err
	}
	port := int32(tb.port)
	name, proto := "https", corev1.ProtocolTCP
	ready := true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kubernetes",
			Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: "kubernetes",
				discoveryv1.LabelManagedBy:   "testbed",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{NodeGateway}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
	_, err := tb.client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, es, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("EndpointSlice default/kubernetes (port %s): %w", strconv.Itoa(tb.port), err)
	}
	return nil
}

// writeCAKey writes the CA's key for the controller-manager's CSR signer.
func (tb *Testbed) writeCAKey() error {
	der, err := x509MarshalKey(tb.pki.caKey)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(tb.Dir, "ca.key"), pemBlock("PRIVATE KEY", der))
}
