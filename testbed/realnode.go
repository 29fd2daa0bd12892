package testbed

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Real nodes: kubelet with Debian's containerd, runc and CNI plugins, each
// node in a network namespace joined to the control plane (see network.go)
// and in mount, UTS and IPC namespaces of its own, held by a sleeping
// process; containerd, kubelet and kube-proxy join them with nsenter. The
// node has no PID namespace of its own. Nothing is added to the host's
// namespaces; cgroup directories (one tree per run) and a state file in
// stateDir are the only things outside the testbed directory, and Stop or
// the next run removes them (realnode_state.go).

// PodSubnet holds the nodes' PodCIDRs: node i gets 10.244.i.0/24.
const PodSubnet = "10.244.0.0/16"

// PodSubnet6 holds the nodes' IPv6 PodCIDRs in a dual-stack testbed: node i
// gets 2001:db8:244:i::/64. Global unicast, as EKS's IPv6 pods are (the
// documentation prefix: it is never routed off this machine), so that
// source policies are tried on pods outside the private ranges.
const PodSubnet6 = "2001:db8:244::/56"

// nodeReadyTimeout bounds a node's start to Ready: 10-30s on two busy cores.
const nodeReadyTimeout = 3 * time.Minute

// RealNodeOptions configures AddRealNode. The zero value is ready to use.
type RealNodeOptions struct {
	// ClusterDNS is kubelet's clusterDNS. Default [DNSServiceIP].
	ClusterDNS []string
	// ClusterDNSNodeIP makes kubelet's clusterDNS the node's own IP (each
	// node its own), as in setups that run a DNS server on the node IP
	// (dnsmasq+CoreDNS DaemonSets). It overrides ClusterDNS.
	ClusterDNSNodeIP bool
	// ProxyMode is kube-proxy's mode. Default ProxyModeIPTables.
	ProxyMode ProxyMode
	// Images are imported into the node's containerd (namespace k8s.io)
	// before kubelet starts. PauseImage must be among them: see
	// BuildPodImages.
	Images []Archive
	// Registries are pulled from as a cluster pulls from its registry:
	// the node's containerd resolves each Registry.Host (the name images
	// are referenced by) through a hosts.toml mirror to Registry.NodeHost,
	// the registry's listener in the control-plane namespace. Pods then
	// name images Host/repository:tag with an ordinary pull policy.
	// RealNode.AddRegistry adds one to a running node.
	Registries []*Registry
	// DualStack starts the testbed dual-stack (Options.DualStack); read
	// only by StartRealNodesForTestWith, which starts the testbed.
	DualStack bool
}

// RealNode is a running kubelet node.
type RealNode struct {
	// Name is the Node object's name and the node's hostname.
	Name string
	// Netns is the node's network namespace.
	Netns string
	// IP is the node's InternalIP.
	IP net.IP
	// PodCIDR is the subnet of the node's pods, on its cni0 bridge.
	PodCIDR string
	// IP6 and PodCIDR6 are the node's IPv6 InternalIP and pod subnet in a
	// dual-stack testbed (Options.DualStack), else nil and "". The Node's
	// spec.podCIDRs then holds PodCIDR and PodCIDR6.
	IP6      net.IP
	PodCIDR6 string
	// Dir holds the node's configuration, state and logs.
	Dir string
	// Proxy is the node's kube-proxy.
	Proxy *KubeProxy

	tb         *Testbed
	cgroupRoot string   // absolute cgroup path of the node's tree
	clusterDNS []string // kubelet's clusterDNS, as kubelet.yaml holds it
	holder     *Process
	containerd *Process
	kubelet    *Process
}

// RealNodeUnavailable returns why AddRealNode cannot run here, or "".
func RealNodeUnavailable() string {
	if r := UnavailableNodes(); r != "" {
		return r
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found: install the Debian packages containerd, runc and containernetworking-plugins"
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat("/usr/lib/cni/" + p); err != nil {
			return "CNI plugin /usr/lib/cni/" + p + " not found: install containernetworking-plugins"
		}
	}
	if _, err := os.Stat(filepath.Join(cgroupFS, "pids", "cgroup.procs")); err != nil {
		return "no cgroup v1 pids hierarchy at " + cgroupFS + "/pids: real nodes are set up for cgroup v1"
	}
	return ""
}

// RealNodeBinaries builds the Kubernetes binaries real nodes run, when not
// cached (about a minute on two cores after kube-apiserver's build):
// tests call it before they start their clocks.
func RealNodeBinaries() error {
	for _, b := range KubernetesBinaries {
		if _, err := Binary(b); err != nil {
			return err
		}
	}
	return nil
}

// AddRealNode starts a node named name: network, namespaces, containerd
// with opts.Images imported, kubelet (which registers the Node), and
// kube-proxy; it returns once the Node is Ready. The first call also
// removes what crashed earlier runs left (see removeLeftovers). Requires
// root; StartControllers should run first so that pods get scheduled.
func (tb *Testbed) AddRealNode(ctx context.Context, name string, opts RealNodeOptions) (_ *RealNode, err error) {
	if r := RealNodeUnavailable(); r != "" {
		return nil, errors.New("real node: " + r)
	}
	if len(opts.ClusterDNS) == 0 {
		opts.ClusterDNS = []string{DNSServiceIP}
	}
	if opts.ProxyMode == "" {
		opts.ProxyMode = ProxyModeIPTables
	}
	kubelet, err := Binary("kubelet")
	if err != nil {
		return nil, err
	}
	state, err := tb.realState(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tb.ensureStubDNS(); err != nil {
		return nil, err
	}
	if err := tb.ensureKubeletClientBinding(ctx); err != nil {
		return nil, err
	}

	tb.mu.Lock()
	index := len(tb.realNodes)
	tb.mu.Unlock()
	ip, netns, err := tb.addNodeLink(ctx, name, "")
	if err != nil {
		return nil, err
	}
	if opts.ClusterDNSNodeIP {
		opts.ClusterDNS = []string{ip.String()}
	}
	n := &RealNode{
		Name: name, Netns: netns, IP: ip,
		PodCIDR:    fmt.Sprintf("10.244.%d.0/24", index),
		Dir:        filepath.Join(tb.Dir, "realnode-"+fileSafe(name)),
		tb:         tb,
		cgroupRoot: "/" + state.Cgroup + "/" + fileSafe(name),
		clusterDNS: opts.ClusterDNS,
	}
	if tb.opts.DualStack {
		n.IP6 = nodeIP6(int(ip.To4()[3]))
		n.PodCIDR6 = fmt.Sprintf("2001:db8:244:%d::/64", index)
	}
	tb.mu.Lock()
	state.Netns = append(state.Netns, netns)
	if tb.network != nil && !containsString(state.Netns, tb.network.netns) {
		state.Netns = append(state.Netns, tb.network.netns)
	}
	tb.realNodes = append(tb.realNodes, n)
	saveErr := state.save()
	tb.mu.Unlock()
	if saveErr != nil {
		return nil, saveErr
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("real node %s: %w", name, err)
		}
	}()

	// A default route, as a real node has: host-network clients of a
	// ClusterIP (the backend's kubernetes plugin reaching 10.96.0.1) need a
	// route before kube-proxy's DNAT picks the endpoint. It leads into the
	// control-plane namespace, which forwards nothing.
	if err := ipCmd(ctx, "-n", netns, "route", "add", "default", "via", NodeGateway, "dev", NodeInterface); err != nil {
		return nil, err
	}
	if n.IP6 != nil {
		if err := ipCmd(ctx, "-6", "-n", netns, "route", "add", "default", "via", NodeGateway6, "dev", NodeInterface); err != nil {
			return nil, err
		}
	}
	if err := n.writeFiles(opts); err != nil {
		return nil, err
	}
	if err := n.makeCgroups(); err != nil {
		return nil, err
	}
	if err := n.startHolder(ctx); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for _, a := range opts.Images {
		if err := n.ImportImage(ctx, a.Path); err != nil {
			return nil, err
		}
	}
	if err := tb.routePodCIDRs(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubelet(kubelet); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, time.Time{}); err != nil {
		return nil, err
	}
	if err := n.setPodCIDRs(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(ctx, opts.ProxyMode); err != nil {
		return nil, err
	}
	tb.opts.Logf("testbed: real node %s ready (%s, pods %s, dir %s)", name, ip, n.PodCIDR, n.Dir)
	return n, nil
}

// realState returns the run's state, creating it (and removing earlier
// runs' leftovers) on first use.
func (tb *Testbed) realState(ctx context.Context) (*runState, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.stopped {
		return nil, errors.New("real node: testbed stopped")
	}
	if tb.rstate != nil {
		return tb.rstate, nil
	}
	removed, err := removeLeftovers(ctx)
	for _, r := range removed {
		tb.opts.Logf("testbed: removed leftovers of an earlier run: %s", r)
	}
	if err != nil {
		return nil, err
	}
	s, err := newRunState()
	if err != nil {
		return nil, err
	}
	if tb.removeDir {
		s.Dirs = append(s.Dirs, tb.Dir)
	}
	if tb.etcdData != "" {
		s.Dirs = append(s.Dirs, tb.etcdData)
	}
	if tb.egressDir != "" {
		s.Dirs = append(s.Dirs, tb.egressDir)
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	tb.rstate = s
	return s, nil
}

// RealNodeLeftovers lists what of this run's real nodes still exists
// (cgroups, network namespaces, directories, processes, the state file):
// empty after Stop.
func (tb *Testbed) RealNodeLeftovers() []string {
	tb.mu.Lock()
	s := tb.rstate
	tb.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.leftovers()
}

// servingIPs are the IP SANs of kubelet's serving certificate.
func (n *RealNode) servingIPs() []net.IP {
	ips := []net.IP{n.IP, net.IPv4(127, 0, 0, 1)}
	if n.IP6 != nil {
		ips = append(ips, n.IP6)
	}
	return ips
}

func (n *RealNode) writeFiles(opts RealNodeOptions) error {
	for _, d := range []string{"var", "cni", "manifests", "sysctl", "kubelet", "containerd", registryHostsDir} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	crt, key, err := n.tb.pki.issue(pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}}, x509.ExtKeyUsageServerAuth, n.servingIPs(), []string{n.Name})
	if err != nil {
		return err
	}
	auth, err := n.tb.certAuth("system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	kc, err := n.tb.writeKubeconfig("kubelet-"+fileSafe(n.Name)+".kubeconfig", n.tb.NodeURL(), auth)
	if err != nil {
		return err
	}
	kcData, err := os.ReadFile(kc)
	if err != nil {
		return err
	}
	// The node's resolv.conf names the stub upstream, with no search domain
	// (pitfall 10): pods with dnsPolicy Default, and CoreDNS's forward, use it.
	resolv := "nameserver " + StubDNSIP + "\noptions timeout:1 attempts:2\n"
	files := map[string]string{
		"containerd.toml":         n.containerdConfig(),
		"cni/10-testbed.conflist": n.cniConfig(),
		"kubelet.yaml":            n.kubeletConfig(n.clusterDNS),
		"kubelet.kubeconfig":      string(kcData),
		"ca.crt":                  string(n.tb.pki.caPEM),
		"kubelet.crt":             string(crt),
		"kubelet.key":             string(key),
		"resolv.conf":             resolv,
	}
	for _, k := range kernelDefaults {
		files["sysctl/"+strings.ReplaceAll(k.path, "/", ".")] = k.value + "\n"
	}
	for name, data := range files {
		if err := writeFile(filepath.Join(n.Dir, name), []byte(data)); err != nil {
			return err
		}
	}
	for _, r := range opts.Registries {
		if err := n.AddRegistry(r); err != nil {
			return err
		}
	}
	return nil
}

// AddRegistry makes the node's containerd pull images named r.Host/...
// through r's listener for nodes (see RealNodeOptions.Registries). On a
// running node it takes effect from the next pull: containerd reads its
// registry hosts directory at every pull.
func (n *RealNode) AddRegistry(r *Registry) error {
	dir := filepath.Join(n.Dir, registryHostsDir, r.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("real node %s: registry %s: %w", n.Name, r.Host, err)
	}
	return writeFile(filepath.Join(dir, "hosts.toml"), []byte(hostsTOML(r)))
}

// makeCgroups creates the node's tree in every hierarchy (kubelet's
// cgroupRoot must exist, pitfall 5), with cpuset.cpus and cpuset.mems
// copied from the root at each level so that tasks may join.
func (n *RealNode) makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		p := h
		for _, part := range strings.Split(strings.Trim(n.cgroupRoot, "/"), "/") {
			p = filepath.Join(p, part)
			dirs = append(dirs, p)
		}
		dirs = append(dirs, filepath.Join(p, "daemons"), filepath.Join(p, "pods"))
		for _, d := range dirs {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", d, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(h, f))
					if err != nil {
						return fmt.Errorf("cgroup %s: %w", d, err)
					}
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return fmt.Errorf("cgroup %s/%s: %w", d, f, err)
					}
				}
			}
		}
	}
	return nil
}

// startHolder starts the process that holds the node's namespaces and
// waits for its mounts.
func (n *RealNode) startHolder(ctx context.Context) error {
	ready := filepath.Join(n.Dir, "namespaces.ready")
	p, err := StartProcess(n.tb.Dir, "realnode-"+fileSafe(n.Name)+"-namespaces", []string{
		"ip", "netns", "exec", n.Netns,
		"unshare", "--uts", "--ipc", "--mount", "--propagation", "private",
		"sh", "-c", n.mountScript(),
	}, nil)
	if err != nil {
		return err
	}
	n.holder = p
	return poll(ctx, p, "node namespaces", func() (bool, error) {
		_, err := os.Stat(ready)
		return err == nil, nil
	})
}

// nsenter returns the argv prefix that runs a command in the node's
// network, mount, UTS and IPC namespaces.
func (n *RealNode) nsenter() []string {
	return []string{"nsenter", "-t", strconv.Itoa(n.holder.PID()), "-m", "-n", "-u", "-i", "--"}
}

// startDaemon starts a node daemon in the node's namespaces, placed in the
// node's daemons cgroup (pids hierarchy) before it execs, so that the
// containerd shims it forks are found by Stop and by a later run.
func (n *RealNode) startDaemon(name, bin string, args ...string) (*Process, error) {
	procs := filepath.Join(cgroupFS, "pids", n.cgroupRoot, "daemons", "cgroup.procs")
	argv := append(n.nsenter(), "sh", "-c", `echo $$ > "$0" && exec "$@"`, procs, bin)
	argv = append(argv, args...)
	return StartProcess(n.Dir, name, argv, nil)
}

func (n *RealNode) startContainerd(ctx context.Context) error {
	p, err := n.startDaemon("containerd", "containerd", "--config="+filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.containerd = p
	return poll(ctx, p, "containerd", func() (bool, error) {
		_, err := n.ctr(ctx, "version")
		return err == nil, nil
	})
}

// ctr runs ctr against the node's containerd, in the node's namespaces.
func (n *RealNode) ctr(ctx context.Context, args ...string) ([]byte, error) {
	argv := append(n.nsenter(), "ctr", "--address", n.containerdSocket(), "--namespace", "k8s.io")
	argv = append(argv, args...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// ImportImage imports an OCI image archive into the node's containerd, as
// `ctr -n k8s.io images import` (what `kind load image-archive` runs).
func (n *RealNode) ImportImage(ctx context.Context, archive string) error {
	_, err := n.ctr(ctx, "images", "import", archive)
	return err
}

// Images lists the node's images as `ctr images ls` prints them.
func (n *RealNode) Images(ctx context.Context) (string, error) {
	out, err := n.ctr(ctx, "images", "ls")
	return string(out), err
}

// Run runs a command in the node's namespaces and returns its output.
func (n *RealNode) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	argv := append(n.nsenter(), name)
	argv = append(argv, args...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s on node %s: %w: %s", name, n.Name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// startKubelet starts kubelet in the node's namespaces with the node's
// kubelet.yaml; it does not wait for it.
func (n *RealNode) startKubelet(bin string) error {
	p, err := n.startDaemon("kubelet", bin,
		"--config="+filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.nodeIPs(),
		"--v=2",
	)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// SetClusterDNS changes kubelet's clusterDNS as an operator does: it
// rewrites the node's KubeletConfiguration, restarts kubelet (SIGTERM, then
// a new kubelet with the same flags) and waits until the restarted kubelet
// has reported the Node Ready. Running pods and their containers stay as
// they are (their resolv.conf was written when they were created); pods
// created afterwards get the new nameservers.
func (n *RealNode) SetClusterDNS(ctx context.Context, clusterDNS []string) error {
	bin, err := Binary("kubelet")
	if err != nil {
		return err
	}
	n.clusterDNS = append([]string(nil), clusterDNS...)
	if err := writeFile(filepath.Join(n.Dir, "kubelet.yaml"), []byte(n.kubeletConfig(n.clusterDNS))); err != nil {
		return err
	}
	if err := n.kubelet.Stop(); err != nil {
		return fmt.Errorf("real node %s: stop kubelet: %w", n.Name, err)
	}
	// The Node's heartbeat has second resolution: one from the new kubelet
	// is at or after this.
	since := time.Now().Truncate(time.Second).Add(time.Second)
	if err := n.startKubelet(bin); err != nil {
		return fmt.Errorf("real node %s: %w", n.Name, err)
	}
	if err := n.waitReady(ctx, since); err != nil {
		return fmt.Errorf("real node %s: %w", n.Name, err)
	}
	return nil
}

// waitReady waits until kubelet has registered the Node and reports Ready,
// in a heartbeat not older than since (zero: any).
func (n *RealNode) waitReady(ctx context.Context, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, nodeReadyTimeout)
	defer cancel()
	err := poll(ctx, n.kubelet, "Node "+n.Name+" Ready", func() (bool, error) {
		node, err := n.tb.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, nil // the relay or the API server is busy: poll again
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since), nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, n.kubelet.LogTail(), n.containerd.LogTail())
	}
	return nil
}

func (n *RealNode) startKubeProxy(ctx context.Context, mode ProxyMode) error {
	bin, err := Binary("kube-proxy")
	if err != nil {
		return err
	}
	auth, err := n.tb.certAuth("system:kube-proxy", nil)
	if err != nil {
		return err
	}
	kc, err := n.tb.writeKubeconfig("kube-proxy-"+fileSafe(n.Name)+".kubeconfig", n.tb.NodeURL(), auth)
	if err != nil {
		return err
	}
	p, err := n.startDaemon("kube-proxy", bin,
		"--kubeconfig="+kc,
		"--hostname-override="+n.Name,
		"--proxy-mode="+string(mode),
		"--cluster-cidr="+PodSubnet,
		// Host-wide sysctls (see StartKubeProxy).
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--v=2",
	)
	if err != nil {
		return err
	}
	n.Proxy = &KubeProxy{Node: &Node{Name: n.Name, Netns: n.Netns, IP: n.IP, Kubeconfig: kc}, Mode: mode, LogPath: p.logPath, proc: p}
	_ = ctx
	return nil
}

// nodeIPs is kubelet's --node-ip: the InternalIP, and IP6 when set.
func (n *RealNode) nodeIPs() string {
	if n.IP6 != nil {
		return n.IP.String() + "," + n.IP6.String()
	}
	return n.IP.String()
}

// setPodCIDRs records the node's pod subnets in its Node's spec.podCIDRs,
// as kube-controller-manager's allocator does in clusters that run it, in
// a dual-stack testbed (single-stack Nodes keep none, as before).
func (n *RealNode) setPodCIDRs(ctx context.Context) error {
	if n.PodCIDR6 == "" {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, n.PodCIDR, n.PodCIDR, n.PodCIDR6)
	if _, err := n.tb.client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set podCIDRs: %w", err)
	}
	return nil
}

// routePodCIDRs routes every node's PodCIDR via its node IP in every other
// node's namespace (the nodes share the control-plane bridge) and in the
// control-plane namespace, where the egress proxy dials pods for the API
// server (egress.go), with ServiceCIDR via the first node.
func (tb *Testbed) routePodCIDRs(ctx context.Context) error {
	tb.mu.Lock()
	nodes := append([]*RealNode(nil), tb.realNodes...)
	cp := tb.network.netns
	tb.mu.Unlock()
	for _, b := range nodes {
		if err := ipCmd(ctx, "-n", cp, "route", "replace", b.PodCIDR, "via", b.IP.String(), "dev", "br0"); err != nil {
			return err
		}
		if b.IP6 != nil {
			if err := ipCmd(ctx, "-6", "-n", cp, "route", "replace", b.PodCIDR6, "via", b.IP6.String(), "dev", "br0"); err != nil {
				return err
			}
		}
	}
	// ClusterIPs (webhooks and APIServices named by Service) via the first
	// node, whose kube-proxy translates them as for its own pods.
	if len(nodes) > 0 {
		if err := ipCmd(ctx, "-n", cp, "route", "replace", ServiceCIDR, "via", nodes[0].IP.String(), "dev", "br0"); err != nil {
			return err
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			if err := ipCmd(ctx, "-n", a.Netns, "route", "replace", b.PodCIDR, "via", b.IP.String(), "dev", NodeInterface); err != nil {
				return err
			}
			if b.IP6 != nil {
				if err := ipCmd(ctx, "-6", "-n", a.Netns, "route", "replace", b.PodCIDR6, "via", b.IP6.String(), "dev", NodeInterface); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// LogTails returns the end of the node's daemon logs.
func (n *RealNode) LogTails() string {
	var s string
	for _, p := range []*Process{n.holder, n.containerd, n.kubelet} {
		if p != nil {
			s += p.LogTail() + "\n"
		}
	}
	if n.Proxy != nil {
		s += n.Proxy.proc.LogTail() + "\n"
	}
	return s
}

// stop ends kubelet and kube-proxy, then every process of the node's
// cgroup tree (containers, shims, containerd), then the holder: the mount
// namespace and its mounts (overlays, pod network namespaces, volumes) go
// with the last of them.
func (n *RealNode) stop() error {
	var errs []error
	for _, p := range []*Process{n.kubelet} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if n.Proxy != nil {
		errs = append(errs, n.Proxy.proc.Stop())
	}
	errs = append(errs, killCgroupProcs(strings.TrimPrefix(n.cgroupRoot, "/")))
	for _, p := range []*Process{n.containerd, n.holder} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs SIGKILLs every process under the pids cgroup path
// (relative to the hierarchy's root) until none is left.
func killCgroupProcs(path string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := pidsInCgroup(path)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v do not exit", path, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ContainerLogs returns the end (at most n bytes) of the kubelet log files
// of every container of pods in namespace ns whose name starts with
// prefix, on this node (kubelet's /var/log/pods, in the node's /var),
// read from the files: it works when the API server or kubelet does not.
func (n *RealNode) ContainerLogs(ns, prefix string, max int) string {
	files, _ := filepath.Glob(filepath.Join(n.Dir, "var", "log", "pods", ns+"_"+prefix+"*", "*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s: %s ---\n%s\n", n.Name, strings.TrimPrefix(f, filepath.Join(n.Dir, "var", "log", "pods")+"/"), tail(data, max))
	}
	return b.String()
}
