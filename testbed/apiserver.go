package testbed

import (
	"net"
	"path/filepath"
	"strconv"
)

// apiserverArgs returns kube-apiserver's command line. Each flag that is not
// a plain default says why it is set.
func (tb *Testbed) apiserverArgs(binary, etcdURL string) []string {
	f := func(name string) string { return filepath.Join(tb.Dir, name) }
	args := []string{
		binary,
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + tb.host.String(),
		"--secure-port=" + strconv.Itoa(tb.port),
		// The advertise address is what the "kubernetes" Service points at;
		// with a loopback address the endpoint reconciler refuses to run, and
		// there are no other API servers to reconcile with anyway.
		"--advertise-address=" + tb.host.String(),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + f("apiserver.crt"),
		"--tls-private-key-file=" + f("apiserver.key"),
		"--cert-dir=" + tb.Dir, // never write into /var/run/kubernetes
		"--client-ca-file=" + f("ca.crt"),
		"--token-auth-file=" + f("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + tb.serviceCIDRs(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--allow-privileged=true",
		"--profiling=false",
		// Kubelets (AddRealNode) serve on their InternalIP, with a serving
		// certificate of the testbed CA for that address; they accept the
		// client certificate of KubeletClientUser from the same CA.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + f("ca.crt"),
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		// Connections to kubelets and pods go through the egress proxy,
		// which dials them from the control-plane namespace (egress.go).
		"--egress-selector-config-file=" + f(egressConfigFile),
	}
	return append(args, tb.opts.ExtraAPIServerArgs...)
}

// serviceCIDRs is kube-apiserver's --service-cluster-ip-range.
func (tb *Testbed) serviceCIDRs() string {
	if tb.opts.DualStack {
		return ServiceCIDR + "," + ServiceCIDR6
	}
	return ServiceCIDR
}

// servingIPs are the IP SANs of the serving certificate: loopback, the bind
// address, the first Service IP (in-cluster clients) and the node-network
// gateway (clients in node network namespaces, see AddNode).
func (tb *Testbed) servingIPs() []net.IP {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(KubernetesServiceIP), nodeGateway}
	if !tb.host.IsLoopback() {
		ips = append(ips, tb.host)
	}
	return ips
}

// servingNames are the DNS SANs of the serving certificate.
var servingNames = []string{
	"localhost",
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}
