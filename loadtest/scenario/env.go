package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/loadtest/gen"
	"github.com/nodedns/nodedns/testbed"
)

// The simulated cluster's addresses besides the testbed's.
const (
	// CentralIP is the central CoreDNS (the kube-dns endpoint of the
	// CoreDNS Deployment), on the "other node".
	CentralIP = "10.0.0.2"
	// UpstreamIP stands for the resolvers outside the cluster, also
	// reached through the other node's link.
	UpstreamIP = "10.0.0.3"
	// UpstreamServiceIP is NodeLocal DNSCache's kube-dns-upstream Service.
	UpstreamServiceIP = "10.96.0.12"
	// FallbackServiceIP is the chart's nodedns-fallback Service.
	FallbackServiceIP = "10.96.0.11"
	// LocalIP is the link-local address NodeLocal DNSCache and nodedns bind.
	LocalIP = "169.254.20.10"
	// NodeUplink is the node's interface toward other nodes; its transmit
	// counter is the "packets that left the node".
	NodeUplink = "lt0"
)

// Options configures an Env.
type Options struct {
	// OutDir receives logs, configs and generator output.
	OutDir string
	// BinDir holds nodedns-frontend, nodedns-backend and nodedns-loadtest.
	BinDir string
	// Pods is the number of pod addresses per node (source IPs).
	Pods int
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// Env is the testbed plus what every design shares: the cluster's
// Services, the "other node" with the central CoreDNS and the upstream.
type Env struct {
	opts       Options
	tb         *testbed.Testbed
	central    *testbed.Node
	centralDNS *process
	// peer is the nodedns backend of the other node, the second endpoint
	// of nodedns-fallback; started with the first nodedns design, nil
	// until then (startNodednsPeer).
	peer *process
	// sliceController is kube-controller-manager running only its
	// EndpointSlice controller, for the CoreDNS DaemonSet designs'
	// Services; started with the first of them (startDSControl).
	sliceController *process
	upstream        *upstream
	// kubeconfig for processes in node namespaces (admin, via NodeURL).
	nodeKubeconfig string
	nodes          int
	cleanups       []func() error
}

// Unavailable returns why scenarios cannot run here, or "".
func Unavailable(binDir string) string {
	if os.Geteuid() != 0 {
		return "needs root: network namespaces, iptables and conntrack (run as root)"
	}
	if r := testbed.UnavailableNodes(); r != "" {
		return r
	}
	for _, tool := range []string{"conntrack", "dnsmasq"} {
		if _, err := lookPath(tool); err != nil {
			return tool + " not found: install the Debian packages conntrack and dnsmasq-base"
		}
	}
	for _, b := range []string{"nodedns-frontend", "nodedns-backend", "nodedns-loadtest"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Sprintf("%s missing in %s: run `make build`", b, binDir)
		}
	}
	return ""
}

// StartEnv starts the testbed, creates the Services of gen's built-in mix
// and kube-dns, the other node with the upstream and the central CoreDNS.
// On error nothing is left behind.
func StartEnv(ctx context.Context, opts Options) (_ *Env, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Pods <= 0 {
		opts.Pods = gen.DefaultPods
	}
	if opts.OutDir, err = filepath.Abs(opts.OutDir); err != nil {
		return nil, err
	}
	if opts.BinDir, err = filepath.Abs(opts.BinDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, err
	}
	e := &Env{opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	opts.Logf("starting etcd and kube-apiserver (testbed; builds kube-apiserver first if it is not cached)")
	tbDir := filepath.Join(opts.OutDir, "testbed")
	_ = os.RemoveAll(tbDir)
	if err := os.MkdirAll(tbDir, 0o755); err != nil {
		return nil, err
	}
	e.tb, err = testbed.Start(ctx, testbed.Options{Dir: tbDir, Logf: opts.Logf})
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	e.cleanups = append(e.cleanups, e.tb.Stop)
	if err := e.createObjects(ctx); err != nil {
		return nil, err
	}
	if e.nodeKubeconfig, err = e.tb.NodeKubeconfig(ctx, e.tb.Kubeconfig); err != nil {
		return nil, err
	}
	opts.Logf("other node: central CoreDNS on %s, upstream on %s", CentralIP, UpstreamIP)
	if e.central, err = e.tb.AddNode(ctx, "node-central", ""); err != nil {
		return nil, err
	}
	for _, ip := range []string{CentralIP, UpstreamIP} {
		if _, err := run(ctx, "ip", "-n", e.central.Netns, "addr", "add", ip+"/32", "dev", "lo"); err != nil {
			return nil, err
		}
	}
	if e.upstream, err = startUpstream(e.central.Netns, UpstreamIP); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	e.cleanups = append(e.cleanups, func() error { e.upstream.Close(); return nil })
	if err := e.startCentral(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops everything, last started first.
func (e *Env) Close() error {
	var errs []error
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, e.cleanups[i]())
	}
	e.cleanups = nil
	return errors.Join(errs...)
}

// Testbed returns the control plane.
func (e *Env) Testbed() *testbed.Testbed { return e.tb }

func (e *Env) createObjects(ctx context.Context) error {
	c := e.tb.Client()
	for _, ns := range []string{gen.BuiltinNamespace, gen.BuiltinOtherNamespace} {
		if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
			return err
		}
		if err := testbed.CreateServices(ctx, c, ns, 0, gen.BuiltinServices, 2); err != nil {
			return err
		}
	}
	// The chart's fallback Service: TCP on the nodedns backends' fallback
	// port; each nodedns node adds its endpoint (addFallbackEndpoint).
	fbPort, err := fallbackPort()
	if err != nil {
		return err
	}
	fb := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "nodedns-fallback", Namespace: "kube-system"},
		Spec: corev1.ServiceSpec{ClusterIP: FallbackServiceIP, Ports: []corev1.ServicePort{
			{Name: "dns-tcp", Port: fbPort, Protocol: corev1.ProtocolTCP},
		}},
	}
	if _, err := c.CoreV1().Services("kube-system").Create(ctx, fb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service nodedns-fallback: %w", err)
	}
	for name, ip := range map[string]string{"kube-dns": testbed.DNSServiceIP, "kube-dns-upstream": UpstreamServiceIP} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			}},
		}
		if _, err := c.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Service %s: %w", name, err)
		}
		udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
		dnsName, tcpName, port := "dns", "dns-tcp", int32(53)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: "kube-system", Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: testbed.ManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{testbedEndpoint(CentralIP)},
			Ports: []discoveryv1.EndpointPort{
				{Name: &dnsName, Port: &port, Protocol: &udp},
				{Name: &tcpName, Port: &port, Protocol: &tcp},
			},
		}
		if _, err := c.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create EndpointSlice %s: %w", slice.Name, err)
		}
	}
	return nil
}

// fallbackSliceName is the EndpointSlice holding node's backend as an
// endpoint of the nodedns-fallback Service.
func fallbackSliceName(node string) string { return "nodedns-fallback-" + node }

// addFallbackEndpoint makes the backend (its fallbackPort) of the nodedns pod on
// node (address ip) an endpoint of the nodedns-fallback Service, ready, as
// the chart's selector would.
func (e *Env) addFallbackEndpoint(ctx context.Context, node, ip string) error {
	port, err := fallbackPort()
	if err != nil {
		return err
	}
	tcp, name := corev1.ProtocolTCP, "dns-tcp"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fallbackSliceName(node), Namespace: "kube-system", Labels: map[string]string{
			discoveryv1.LabelServiceName: "nodedns-fallback", discoveryv1.LabelManagedBy: testbed.ManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{testbedEndpoint(ip)},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}
	if _, err := e.tb.Client().DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create EndpointSlice %s: %w", slice.Name, err)
	}
	return nil
}

// removeFallbackEndpoint deletes node's endpoint: its pod is gone.
func (e *Env) removeFallbackEndpoint(ctx context.Context, node string) error {
	err := e.tb.Client().DiscoveryV1().EndpointSlices("kube-system").Delete(ctx, fallbackSliceName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete EndpointSlice %s: %w", fallbackSliceName(node), err)
	}
	return nil
}

// setFallbackReady sets the conditions of node's fallback endpoint as the
// EndpointSlice controller does for a pod that is (not) ready and not
// terminating: ready and serving follow the pod's Ready condition.
func (e *Env) setFallbackReady(ctx context.Context, node string, ready bool) error {
	c := e.tb.Client().DiscoveryV1().EndpointSlices("kube-system")
	slice, err := c.Get(ctx, fallbackSliceName(node), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get EndpointSlice %s: %w", fallbackSliceName(node), err)
	}
	slice = slice.DeepCopy()
	terminating := false
	for i := range slice.Endpoints {
		slice.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: &terminating}
	}
	if _, err := c.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update EndpointSlice %s: %w", slice.Name, err)
	}
	return nil
}

func testbedEndpoint(ip string) discoveryv1.Endpoint {
	ready := true
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

// centralCorefile is kubeadm's CoreDNS Corefile, bound to CentralIP, with
// the kubeconfig that stands for the in-cluster ServiceAccount and the
// upstream for /etc/resolv.conf.
func centralCorefile(kubeconfig string) string {
	return `.:53 {
    bind ` + CentralIP + `
    errors
    health ` + CentralIP + `:8080 {
        lameduck 5s
    }
    ready ` + CentralIP + `:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig ` + kubeconfig + `
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus ` + CentralIP + `:9153
    forward . ` + UpstreamIP + ` {
        max_concurrent 1000
    }
    cache 30 {
        disable success cluster.local
        disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`
}

func (e *Env) startCentral(ctx context.Context) error {
	conf := filepath.Join(e.opts.OutDir, "central.Corefile")
	if err := os.WriteFile(conf, []byte(centralCorefile(e.nodeKubeconfig)), 0o644); err != nil {
		return err
	}
	p, err := startProcess(e.opts.OutDir, "central-coredns", e.central.Netns, nil, e.bin("nodedns-backend"), "-conf", conf)
	if err != nil {
		return err
	}
	e.centralDNS = p
	e.cleanups = append(e.cleanups, p.Stop)
	return waitHTTP(ctx, p, e.central.Netns, "http://"+CentralIP+":8181/ready", 2*time.Minute)
}

func (e *Env) bin(name string) string { return filepath.Join(e.opts.BinDir, name) }

// waitHTTP polls url from netns until it answers 200, p exits or timeout.
func waitHTTP(ctx context.Context, p *process, netns, url string, timeout time.Duration) error {
	return poll(ctx, p, timeout, url+" not ready", func(ctx context.Context) error {
		code, _, err := httpGet(ctx, netns, url)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
}

// poll calls try every 200ms until it returns nil, p (when not nil) exits,
// or timeout passes; then the error says what, with try's last error.
func poll(ctx context.Context, p *process, timeout time.Duration, what string, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if p != nil && p.Exited() {
			return p.errExited()
		}
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s after %v: %v", what, timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// httpGet fetches url from inside netns.
func httpGet(ctx context.Context, netns, url string) (int, string, error) {
	tr := &http.Transport{DialContext: dialer(netns), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricSum sums the samples of a Prometheus counter family in text
// format, e.g. coredns_dns_requests_total, whose labels match filter
// (substrings of the label set; nil: all).
func metricSum(text, family string, filter ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, family) || len(line) <= len(family) || (line[len(family)] != '{' && line[len(family)] != ' ') {
			continue
		}
		ok := true
		for _, f := range filter {
			ok = ok && strings.Contains(line, f)
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil && len(fields) >= 2 {
			sum += v
		}
	}
	return sum
}
