// Package testbed runs a real Kubernetes control plane for tests: Debian's
// etcd and kube-apiserver built from the k8s.io/kubernetes module (see
// tools/k8s), on free loopback ports, with generated certificates, RBAC on,
// and helpers to mint restricted credentials and to run the real kube-proxy
// inside a node network namespace.
//
// There is no controller-manager and no scheduler: objects that controllers
// would maintain (EndpointSlices, ServiceAccount tokens in Secrets, Pod
// status) are created by the test itself.
package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// ServiceCIDR is kube-apiserver's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the first Service IP, held by the "kubernetes"
	// Service and present in the serving certificate.
	KubernetesServiceIP = "10.96.0.1"
	// DNSServiceIP is the ClusterIP tests give the kube-dns Service.
	DNSServiceIP = "10.96.0.10"
	// ServiceCIDR6 is the secondary (IPv6) Service range of a dual-stack
	// testbed (Options.DualStack).
	ServiceCIDR6 = "fd00:10:96::/112"
	// DNSServiceIP6 is the IPv6 ClusterIP tests give a dual-stack kube-dns.
	DNSServiceIP6 = "fd00:10:96::a"
	// AdminUser is the user of Kubeconfig and Client, in group system:masters.
	AdminUser = "testbed-admin"
	// KubeletClientUser is kube-apiserver's user towards kubelets (its
	// --kubelet-client-certificate), bound to system:kubelet-api-admin.
	KubeletClientUser = "kube-apiserver-kubelet-client"
)

// defaultStartTimeout bounds Start and RestartAPIServer: kube-apiserver is
// ready in 5-20s on two busy cores; the margin absorbs a loaded CI machine.
const defaultStartTimeout = 2 * time.Minute

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Dir holds certificates, kubeconfigs and process logs. Default: a new
	// temporary directory, removed by Stop unless NODEDNS_TESTBED_KEEP=1.
	// A given Dir is never removed.
	Dir string
	// BindAddress is the address kube-apiserver listens on and advertises;
	// it must be an address of this network namespace. Default 127.0.0.1.
	// Processes in node network namespaces reach the API server through
	// AddNode instead (see network.go).
	BindAddress net.IP
	// Port is kube-apiserver's secure port. Default: a free port.
	Port int
	// DualStack gives the cluster IPv6 besides IPv4, as a dual-stack
	// kubeadm cluster has it: kube-apiserver gets ServiceCIDR6 as its
	// secondary Service range, and real nodes (AddRealNode) an IPv6
	// address in NodeSubnet6, an IPv6 PodCIDR of PodSubnet6 on their pod
	// network, both in the Node's spec.podCIDRs, and kubelet both node IPs.
	DualStack bool
	// ExtraAPIServerArgs are appended to kube-apiserver's flags; a flag given
	// here overrides the testbed's own value.
	ExtraAPIServerArgs []string
	// StartTimeout bounds Start and RestartAPIServer. Default 2m.
	StartTimeout time.Duration
	// Logf receives progress lines (t.Logf in tests). Default: discarded.
	Logf func(format string, args ...any)
}

// Testbed is a running etcd and kube-apiserver. Its methods are safe for
// concurrent use. Stop releases everything.
type Testbed struct {
	// Dir holds certificates, kubeconfigs and the logs etcd.log,
	// kube-apiserver.log and kube-proxy-<node>.log.
	Dir string
	// Kubeconfig is the path of a kubeconfig for AdminUser (system:masters),
	// valid in the network namespace that started the testbed.
	Kubeconfig string

	opts       Options
	removeDir  bool
	pki        *pki
	host       net.IP
	port       int
	adminToken string
	etcdData   string   // etcd's data directory, on tmpfs when available
	apiArgs    []string // kube-apiserver argv, reused by RestartAPIServer
	restConfig *rest.Config
	client     kubernetes.Interface

	mu         sync.Mutex // guards the fields below
	etcd       *Process
	apiserver  *Process
	network    *network     // created by the first AddNode
	proxies    []*KubeProxy // in start order
	realNodes  []*RealNode  // in start order (realnode.go)
	rstate     *runState    // state of this run's real nodes, or nil
	control    []*Process   // kube-controller-manager, kube-scheduler (controllers.go)
	stubDNS    *stubDNS     // the node namespaces' upstream, or nil (stubdns.go)
	registries []*Registry  // started by StartRegistry (registry.go)
	egress     *egressProxy // kube-apiserver's "cluster" egress (egress.go)
	egressDir  string       // the egress socket's directory when not Dir, or ""
	stopped    bool
}

// Start starts etcd and kube-apiserver and returns once /readyz answers ok
// and the default and kube-system namespaces exist. ctx bounds only the
// start; the processes run until Stop. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Testbed, err error) {
	if opts.BindAddress == nil {
		opts.BindAddress = net.IPv4(127, 0, 0, 1)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	etcdPath, err := EtcdPath()
	if err != nil {
		return nil, err
	}
	apiserverPath, err := Binary("kube-apiserver")
	if err != nil {
		return nil, err
	}

	tb := &Testbed{opts: opts, host: opts.BindAddress, port: opts.Port, Dir: opts.Dir}
	if tb.Dir == "" {
		if tb.Dir, err = os.MkdirTemp("", "nodedns-testbed-"); err != nil {
			return nil, fmt.Errorf("create testbed directory: %w", err)
		}
		tb.removeDir = os.Getenv("NODEDNS_TESTBED_KEEP") != "1"
	} else if err := os.MkdirAll(tb.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create testbed directory: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tb.Stop())
		}
	}()

	if err := tb.writeCredentials(); err != nil {
		return nil, err
	}
	if err := tb.startEgress(); err != nil {
		return nil, err
	}
	etcdURL, err := tb.startEtcd(ctx, etcdPath)
	if err != nil {
		return nil, err
	}
	if tb.port == 0 {
		if tb.port, err = freePort(tb.host); err != nil {
			return nil, err
		}
	}
	tb.apiArgs = tb.apiserverArgs(apiserverPath, etcdURL)
	tb.restConfig = &rest.Config{
		Host:            tb.URL(),
		BearerToken:     tb.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: tb.pki.caPEM},
		// Tests create objects in bursts; the client-side default (5 QPS)
		// would make them slow, not the API server.
		QPS:   200,
		Burst: 400,
	}
	if tb.client, err = kubernetes.NewForConfig(tb.restConfig); err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	if tb.Kubeconfig, err = tb.writeKubeconfig("admin.kubeconfig", tb.URL(), tb.adminAuth()); err != nil {
		return nil, err
	}
	if err := tb.startAPIServer(ctx); err != nil {
		return nil, err
	}
	opts.Logf("testbed: kube-apiserver %s ready at %s (dir %s)", KubernetesVersion, tb.URL(), tb.Dir)
	return tb, nil
}

// URL is the https URL of kube-apiserver.
func (tb *Testbed) URL() string {
	return "https://" + net.JoinHostPort(tb.host.String(), strconv.Itoa(tb.port))
}

// CAData is the PEM certificate of the CA that signed the serving and all
// client certificates.
func (tb *Testbed) CAData() []byte { return tb.pki.caPEM }

// RestConfig returns a copy of the admin client configuration.
func (tb *Testbed) RestConfig() *rest.Config { return rest.CopyConfig(tb.restConfig) }

// Client returns an admin clientset.
func (tb *Testbed) Client() kubernetes.Interface { return tb.client }

// APIServerPID returns the process id of the running kube-apiserver (it
// changes with RestartAPIServer), for reading /proc/<pid>/status.
func (tb *Testbed) APIServerPID() int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.apiserver == nil {
		return 0
	}
	return tb.apiserver.PID()
}

// Metrics returns kube-apiserver's /metrics in the Prometheus text format.
func (tb *Testbed) Metrics(ctx context.Context) ([]byte, error) {
	b, err := tb.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("get kube-apiserver /metrics: %w", err)
	}
	return b, nil
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address; etcd keeps the data. Clients reconnect on their own (watches
// resume). It returns once the new process is ready.
func (tb *Testbed) RestartAPIServer(ctx context.Context) error {
	if err := tb.StopAPIServer(); err != nil {
		return fmt.Errorf("restart %w", err)
	}
	return tb.StartAPIServer(ctx)
}

// StopAPIServer stops kube-apiserver and leaves it down (etcd keeps the
// data) until StartAPIServer: an API server outage, as kubelets,
// kube-proxies and the pods' watches see it.
func (tb *Testbed) StopAPIServer() error {
	tb.mu.Lock()
	p := tb.apiserver
	stopped := tb.stopped
	tb.mu.Unlock()
	if stopped {
		return errors.New("kube-apiserver: testbed stopped")
	}
	if p != nil {
		if err := p.Stop(); err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
	}
	return nil
}

// StartAPIServer starts kube-apiserver again on the same address, after
// StopAPIServer, and returns once it is ready.
func (tb *Testbed) StartAPIServer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, tb.opts.StartTimeout)
	defer cancel()
	tb.mu.Lock()
	stopped := tb.stopped
	tb.mu.Unlock()
	if stopped {
		return errors.New("start kube-apiserver: testbed stopped")
	}
	return tb.startAPIServer(ctx)
}

// LogTails returns the end of every process log, for failure reports.
func (tb *Testbed) LogTails() string {
	tb.mu.Lock()
	procs := []*Process{tb.etcd, tb.apiserver}
	procs = append(procs, tb.control...)
	for _, kp := range tb.proxies {
		procs = append(procs, kp.proc)
	}
	realNodes := tb.realNodes
	tb.mu.Unlock()
	var s string
	for _, p := range procs {
		if p != nil {
			s += p.LogTail() + "\n"
		}
	}
	for _, n := range realNodes {
		s += n.LogTails()
	}
	return s
}

// Stop stops kube-proxies, removes the node network, stops kube-apiserver
// and etcd, and removes the directories the testbed created. It is safe to
// call more than once and from a t.Cleanup after a failed test.
func (tb *Testbed) Stop() error {
	tb.mu.Lock()
	if tb.stopped {
		tb.mu.Unlock()
		return nil
	}
	tb.stopped = true
	proxies, nw, api, etcd := tb.proxies, tb.network, tb.apiserver, tb.etcd
	realNodes, control, stub, registries := tb.realNodes, tb.control, tb.stubDNS, tb.registries
	egress := tb.egress
	tb.mu.Unlock()

	var errs []error
	for _, n := range realNodes {
		errs = append(errs, n.stop())
	}
	for _, p := range control {
		errs = append(errs, p.Stop())
	}
	if stub != nil {
		errs = append(errs, stub.close())
	}
	for _, r := range registries {
		errs = append(errs, r.close())
	}
	for _, kp := range proxies {
		errs = append(errs, kp.proc.Stop())
	}
	if nw != nil {
		errs = append(errs, nw.close())
	}
	if api != nil {
		errs = append(errs, api.Stop())
	}
	if etcd != nil {
		errs = append(errs, etcd.Stop())
	}
	if egress != nil {
		errs = append(errs, egress.close())
	}
	if tb.egressDir != "" {
		errs = append(errs, os.RemoveAll(tb.egressDir))
	}
	if tb.etcdData != "" {
		errs = append(errs, os.RemoveAll(tb.etcdData))
	}
	if tb.removeDir {
		errs = append(errs, os.RemoveAll(tb.Dir))
	}
	if tb.rstate != nil {
		// Last: the cgroup tree (any process still in it is killed), what is
		// left of the namespaces and directories, and the state file.
		errs = append(errs, tb.rstate.remove(context.Background()))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop testbed: %w", err)
	}
	return nil
}

// startAPIServer starts kube-apiserver with tb.apiArgs and waits for it.
func (tb *Testbed) startAPIServer(ctx context.Context) error {
	p, err := StartProcess(tb.Dir, "kube-apiserver", tb.apiArgs, nil)
	if err != nil {
		return err
	}
	tb.mu.Lock()
	tb.apiserver = p
	stopped := tb.stopped
	tb.mu.Unlock()
	if stopped { // Stop ran meanwhile and did not see p
		return errors.Join(errors.New("start kube-apiserver: testbed stopped"), p.Stop())
	}
	if err := tb.waitReady(ctx, p); err != nil {
		return fmt.Errorf("%w\n%s", err, p.LogTail())
	}
	return nil
}

// waitReady polls /readyz until it answers 200, then waits for the
// namespaces the bootstrap controller creates (tests put objects there).
func (tb *Testbed) waitReady(ctx context.Context, p *Process) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(tb.pki.caPEM)
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true},
	}
	ready := func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, tb.URL()+"/readyz", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+tb.adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil // not listening yet
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK, nil
	}
	if err := poll(ctx, p, "kube-apiserver /readyz", ready); err != nil {
		return err
	}
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
		exists := func() (bool, error) {
			_, err := tb.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, nil
		}
		if err := poll(ctx, p, "namespace "+ns, exists); err != nil {
			return err
		}
	}
	return nil
}

// pollInterval is short against a start measured in seconds, and long enough
// not to load the two shared cores.
const pollInterval = 200 * time.Millisecond

// poll calls cond until it returns true, p exits, or ctx ends.
func poll(ctx context.Context, p *Process, what string, cond func() (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if done, perr := p.Exited(); done {
			return fmt.Errorf("wait for %s: %s exited: %v", what, p.name, perr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// freePort returns a TCP port that was free on host a moment ago. Another
// process may take it before kube-apiserver binds; Start then fails with the
// log saying so, which is rare enough not to retry.
func freePort(host net.IP) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
