package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/testbed"
)

// The CoreDNS DaemonSet designs: kubeadm's CoreDNS in a pod of its own on
// every node, behind a kube-dns Service that keeps a pod's lookups on its
// node. Each design has its own Service (the designs' nodes share one
// cluster, and a node uses only its own design's Service): the same
// selector-based Service kube-dns would be, with internalTrafficPolicy
// Local or trafficDistribution PreferSameNode. Its EndpointSlices are the
// work of kube-controller-manager's EndpointSlice controller, from Pod
// objects whose status the harness sets as kubelet would: the
// PreferSameNode hints (hints.forNodes) that kube-proxy reads are the
// controller's own.
const (
	// DSLocalServiceIP is the ClusterIP of coredns-ds-local's kube-dns.
	DSLocalServiceIP = "10.96.0.13"
	// DSPreferServiceIP is the ClusterIP of coredns-ds-prefer's kube-dns.
	DSPreferServiceIP = "10.96.0.14"
	// dsPodHost is the host number of the CoreDNS pod's address in its
	// node's pod network (10.244.N.254), beyond the load's pods.
	dsPodHost = 254
	// dsServiceAccount runs the DaemonSet's pods (the ServiceAccount
	// admission plugin refuses pods whose account does not exist).
	dsServiceAccount = "coredns"
)

// dsKind is what differs between the two DaemonSet designs.
type dsKind struct {
	design    string // the design's name
	serviceIP string
	label     string // the label its pods carry, the Service's selector
}

var (
	dsLocal  = dsKind{"coredns-ds-local", DSLocalServiceIP, "nodedns.io/coredns-ds-local"}
	dsPrefer = dsKind{"coredns-ds-prefer", DSPreferServiceIP, "nodedns.io/coredns-ds-prefer"}
)

// service is the kind's kube-dns Service.
func (k dsKind) service() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-" + strings.TrimPrefix(k.design, "coredns-"), Namespace: "kube-system",
			Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: k.serviceIP,
			Selector:  map[string]string{k.label: "true"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if k == dsLocal {
		local := corev1.ServiceInternalTrafficPolicyLocal
		svc.Spec.InternalTrafficPolicy = &local
	} else {
		prefer := corev1.ServiceTrafficDistributionPreferSameNode
		svc.Spec.TrafficDistribution = &prefer
	}
	return svc
}

// dsPodName is the name of the DaemonSet's pod on node.
func dsPodName(node string) string { return "coredns-ds-" + node }

// dsPod is the Pod object of the DaemonSet's CoreDNS on node at ip,
// carrying the given selector labels.
func dsPod(node, ip string, labels ...string) *corev1.Pod {
	l := map[string]string{"k8s-app": "coredns-ds"}
	for _, k := range labels {
		l[k] = "true"
	}
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: dsPodName(node), Namespace: "kube-system", Labels: l},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			ServiceAccountName:           dsServiceAccount,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name:  "coredns",
				Image: "registry.k8s.io/coredns/coredns",
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
				},
			}},
		},
	}
}

// podStatus is the status kubelet reports for a running pod at ip on a
// node at hostIP, Ready or not.
func podStatus(ip, hostIP string, ready bool) corev1.PodStatus {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	return corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		},
	}
}

// createDSPod creates the pod object and reports it running at ip, ready
// or not, as the scheduler and kubelet would.
func (e *Env) createDSPod(ctx context.Context, pod *corev1.Pod, ip, hostIP string, ready bool) error {
	c := e.tb.Client().CoreV1().Pods(pod.Namespace)
	created, err := c.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Pod %s: %w", pod.Name, err)
	}
	created.Status = podStatus(ip, hostIP, ready)
	if _, err := c.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of Pod %s: %w", pod.Name, err)
	}
	return nil
}

// setDSPodReady sets the Ready condition of node's DaemonSet pod, as
// kubelet does when its container dies or its readiness probe passes.
func (e *Env) setDSPodReady(ctx context.Context, node string, ready bool) error {
	c := e.tb.Client().CoreV1().Pods("kube-system")
	pod, err := c.Get(ctx, dsPodName(node), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Pod %s: %w", dsPodName(node), err)
	}
	pod = pod.DeepCopy()
	pod.Status = podStatus(pod.Status.PodIP, pod.Status.HostIP, ready)
	if _, err := c.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of Pod %s: %w", pod.Name, err)
	}
	return nil
}

// deleteDSPod deletes node's DaemonSet pod; grace 0 removes it at once,
// as kubelet does once the containers of a deleted pod stopped; a
// positive grace leaves it terminating.
func (e *Env) deleteDSPod(ctx context.Context, node string, grace int64) error {
	err := e.tb.Client().CoreV1().Pods("kube-system").Delete(ctx, dsPodName(node), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Pod %s: %w", dsPodName(node), err)
	}
	return nil
}

// startDSControl creates, once per Env, what the DaemonSet designs share:
// both Services, the other node's CoreDNS as a pod of both (the central
// CoreDNS runs kubeadm's Corefile too: the other node's DaemonSet pod,
// where PreferSameNode falls back to) and kube-controller-manager with
// only its EndpointSlice controller.
func (e *Env) startDSControl(ctx context.Context) error {
	if e.sliceController != nil {
		return nil
	}
	c := e.tb.Client()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: dsServiceAccount, Namespace: "kube-system"}}
	if _, err := c.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s: %w", sa.Name, err)
	}
	for _, k := range []dsKind{dsLocal, dsPrefer} {
		if _, err := c.CoreV1().Services("kube-system").Create(ctx, k.service(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Service for %s: %w", k.design, err)
		}
	}
	if err := e.createDSPod(ctx, dsPod(e.central.Name, CentralIP, dsLocal.label, dsPrefer.label), CentralIP, e.central.IP.String(), true); err != nil {
		return err
	}
	// The other node forwards between nodes: a node whose own pod is not
	// ready reaches the central pod, or another node's.
	if _, err := run(ctx, "ip", "netns", "exec", e.central.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	kcm, err := testbed.Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	p, err := startProcess(e.opts.OutDir, "kube-controller-manager", "", nil, kcm,
		"--kubeconfig="+e.tb.Kubeconfig,
		"--controllers=endpointslice",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--profiling=false",
		"--v=1")
	if err != nil {
		return err
	}
	e.sliceController = p
	e.cleanups = append(e.cleanups, p.Stop)
	return e.waitSliceEndpoint(ctx, dsPrefer, CentralIP, true)
}

// waitSliceEndpoint waits until the controller's EndpointSlices of k's
// Service hold ip with the given readiness and, when ready under
// PreferSameNode, the node hint.
func (e *Env) waitSliceEndpoint(ctx context.Context, k dsKind, ip string, ready bool) error {
	sel := discoveryv1.LabelServiceName + "=" + k.service().Name
	return poll(ctx, e.sliceController, time.Minute, fmt.Sprintf("EndpointSlice of %s with %s ready=%v", k.design, ip, ready), func(ctx context.Context) error {
		l, err := e.tb.Client().DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) == 0 || ep.Addresses[0] != ip {
					continue
				}
				isReady := ep.Conditions.Ready != nil && *ep.Conditions.Ready
				if isReady != ready {
					return fmt.Errorf("ready=%v", isReady)
				}
				if ready && k == dsPrefer && (ep.Hints == nil || len(ep.Hints.ForNodes) != 1) {
					return errors.New("no node hint")
				}
				return nil
			}
		}
		return errors.New("not in the slices")
	})
}

// dsCorefile is kubeadm's Corefile bound to the pod's address.
func dsCorefile(kubeconfig, podIP string) string {
	return strings.ReplaceAll(centralCorefile(kubeconfig), CentralIP, podIP)
}

func startCoreDNSDSLocal(ctx context.Context, e *Env, n *simNode) (*running, error) {
	return startCoreDNSDS(ctx, e, n, dsLocal)
}

func startCoreDNSDSPrefer(ctx context.Context, e *Env, n *simNode) (*running, error) {
	return startCoreDNSDS(ctx, e, n, dsPrefer)
}

// startCoreDNSDS runs the DaemonSet's CoreDNS pod on n: a network
// namespace of its own behind a veth, as a CNI plugin would give it, at
// 10.244.N.254 in the node's pod network; the pod object, ready once
// CoreDNS's /ready answers; kube-proxy's rules for the pod's endpoint.
func startCoreDNSDS(ctx context.Context, e *Env, n *simNode, k dsKind) (_ *running, err error) {
	if err := e.startDSControl(ctx); err != nil {
		return nil, err
	}
	r := &running{Nameserver: k.serviceIP + ":53"}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Stop())
		}
	}()
	ns, err := netnstest.Create(ctx, "nodedns-lt-dspod")
	if err != nil {
		return nil, err
	}
	r.stop = append(r.stop, ns.Delete)
	gw := n.PodIPs[0].Prev() // the node's pod0 address, 10.244.N.1
	ip := net.IPv4(gw.As4()[0], gw.As4()[1], gw.As4()[2], dsPodHost).String()
	for _, st := range [][]string{
		{"-n", n.Netns, "link", "add", "dsp0", "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		{"-n", n.Netns, "link", "set", "dsp0", "up"},
		{"-n", n.Netns, "route", "add", ip + "/32", "dev", "dsp0"},
		{"-n", ns.Name, "addr", "add", ip + "/32", "dev", "eth0"},
		{"-n", ns.Name, "link", "set", "eth0", "up"},
		{"-n", ns.Name, "link", "set", "lo", "up"},
		{"-n", ns.Name, "route", "add", gw.String(), "dev", "eth0", "scope", "link"},
		{"-n", ns.Name, "route", "add", "default", "via", gw.String()},
	} {
		if _, err := run(ctx, "ip", st...); err != nil {
			return nil, fmt.Errorf("pod network of %s: %w", k.design, err)
		}
	}
	// The pod reaches the API server outside the cluster network through
	// the node's address, as a CNI plugin's masquerade does.
	masq := []string{"-w", "-t", "nat", "POSTROUTING", "-s", ip + "/32", "-o", testbed.NodeInterface, "-j", "MASQUERADE"}
	if _, err := n.exec(ctx, "iptables", append([]string{masq[0], masq[1], masq[2], "-A"}, masq[3:]...)...); err != nil {
		return nil, err
	}
	r.stop = append(r.stop, func() error {
		_, err := n.exec(context.Background(), "iptables", append([]string{masq[0], masq[1], masq[2], "-D"}, masq[3:]...)...)
		return err
	})
	if err := e.createDSPod(ctx, dsPod(n.Name, ip, k.label), ip, n.IP.String(), false); err != nil {
		return nil, err
	}
	r.stop = append(r.stop, func() error { return e.deleteDSPod(context.Background(), n.Name, 0) })
	conf := filepath.Join(e.opts.OutDir, n.Name+".Corefile")
	if err := os.WriteFile(conf, []byte(dsCorefile(e.nodeKubeconfig, ip)), 0o644); err != nil {
		return nil, err
	}
	p, err := startProcess(e.opts.OutDir, n.Name+"-coredns", ns.Name, nil, e.bin("nodedns-backend"), "-conf", conf)
	if err != nil {
		return nil, err
	}
	r.Procs = append(r.Procs, p)
	r.stop = append(r.stop, func() error { return r.Procs[0].Stop() })
	r.APITier = metricsTarget{ns.Name, "http://" + ip + ":9153/metrics"}
	r.ds = &dsPodRun{kind: k, netns: ns.Name, ip: ip, readyURL: "http://" + ip + ":8181/ready"}
	if err := e.dsBecomeReady(ctx, r, n); err != nil {
		return nil, err
	}
	return r, nil
}

// dsPodRun is the DaemonSet pod of a running CoreDNS DaemonSet design.
type dsPodRun struct {
	kind                dsKind
	netns, ip, readyURL string
}

// dsBecomeReady plays kubelet's readiness probe for the node's CoreDNS:
// once /ready answers, the pod is Ready; it returns when kube-proxy on
// the node DNATs to the pod.
func (e *Env) dsBecomeReady(ctx context.Context, r *running, n *simNode) error {
	if err := waitHTTP(ctx, r.Procs[0], r.ds.netns, r.ds.readyURL, 2*time.Minute); err != nil {
		return err
	}
	if err := e.setDSPodReady(ctx, n.Name, true); err != nil {
		return err
	}
	if err := e.waitSliceEndpoint(ctx, r.ds.kind, r.ds.ip, true); err != nil {
		return err
	}
	_, err := n.kp.WaitForRules(ctx, r.ds.ip+":53")
	return err
}
