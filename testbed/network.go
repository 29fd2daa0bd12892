package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// The node network. 127.0.0.1 inside a node network namespace is that
// namespace's own loopback, so node processes (kube-proxy, a frontend, a
// backend) cannot reach the API server on the host's loopback. AddNode joins
// each node namespace by a veth pair to a bridge inside a dedicated
// control-plane namespace; the bridge holds NodeGateway, where an in-process
// TCP relay passes connections on to kube-apiserver. No address is added to
// the host's namespace, and all traffic stays in namespaces the testbed made.
//
//	node netns (NodeInterface, 172.31.254.10/24) ──veth── cp netns: bridge 172.31.254.1 ──relay──► kube-apiserver (host loopback)
const (
	// NodeSubnet holds the node addresses and the gateway.
	NodeSubnet = "172.31.254.0/24"
	// NodeGateway is where processes in node namespaces reach the API server
	// (on the API server's port, see NodeURL).
	NodeGateway = "172.31.254.1"
	// NodeSubnet6 and NodeGateway6 are their IPv6 counterparts, in a
	// dual-stack testbed (Options.DualStack).
	NodeSubnet6  = "fd00:172:31:254::/64"
	NodeGateway6 = "fd00:172:31:254::1"
	// NodeInterface is the name of the veth end in each node namespace.
	NodeInterface = "testbed0"
)

// firstNodeHost is the host part of the first node address; .2-.9 stay free
// for a test's own use.
const firstNodeHost = 10

var nodeGateway = net.ParseIP(NodeGateway).To4()

// Node is a Kubernetes Node object backed by a network namespace that can
// reach the API server.
type Node struct {
	// Name is the Node object's name (kube-proxy's --hostname-override).
	Name string
	// Netns is the network namespace (an `ip netns` name).
	Netns string
	// IP is the Node's InternalIP, on NodeInterface in Netns.
	IP net.IP
	// Kubeconfig authenticates as system:kube-proxy (bound to the
	// system:node-proxier ClusterRole) against NodeURL; use it from Netns.
	Kubeconfig string
}

// network is the control-plane namespace with its bridge and relay.
type network struct {
	netns  string
	ln     net.Listener // in netns, on NodeGateway
	target string       // kube-apiserver host:port in the host namespace

	mu     sync.Mutex // guards the fields below
	conns  map[net.Conn]struct{}
	next   int      // host part of the next node address
	owned  []string // node namespaces AddNode created, deleted by close
	veths  []string // bridge-side veth ends, deleted by close
	closed bool

	wg sync.WaitGroup // relay goroutines
}

// NodeURL is the API server's URL as seen from node network namespaces.
func (tb *Testbed) NodeURL() string {
	return "https://" + net.JoinHostPort(NodeGateway, strconv.Itoa(tb.port))
}

// AddNode creates the Node object name with an InternalIP from NodeSubnet,
// and connects a network namespace to the control plane: netns if given (an
// existing `ip netns` name, which keeps existing after Stop, minus the veth),
// else a new one that Stop deletes. Requires root.
func (tb *Testbed) AddNode(ctx context.Context, name, netns string) (*Node, error) {
	ip, netns, err := tb.addNodeLink(ctx, name, netns)
	if err != nil {
		return nil, err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			// Nodes accept status on create; kube-proxy reads the InternalIP
			// to learn the node's address and IP family.
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip.String()},
				{Type: corev1.NodeHostName, Address: name},
			},
		},
	}
	if _, err := tb.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("add node %s: create Node: %w", name, err)
	}
	auth, err := tb.certAuth("system:kube-proxy", nil)
	if err != nil {
		return nil, err
	}
	kc, err := tb.writeKubeconfig("kube-proxy-"+fileSafe(name)+".kubeconfig", tb.NodeURL(), auth)
	if err != nil {
		return nil, err
	}
	return &Node{Name: name, Netns: netns, IP: ip, Kubeconfig: kc}, nil
}

// addNodeLink joins a network namespace (netns, or a new one that Stop
// deletes) to the control-plane bridge with the next address of NodeSubnet,
// and returns that address and the namespace.
func (tb *Testbed) addNodeLink(ctx context.Context, name, netns string) (net.IP, string, error) {
	nw, err := tb.ensureNetwork(ctx)
	if err != nil {
		return nil, "", err
	}
	nw.mu.Lock()
	if nw.next > 254 {
		nw.mu.Unlock()
		return nil, "", fmt.Errorf("add node %s: %s is full", name, NodeSubnet)
	}
	host := nw.next
	nw.next++
	if netns == "" {
		netns = "nodedns-node-" + randomToken()[:8]
		if err := ipCmd(ctx, "netns", "add", netns); err != nil {
			nw.mu.Unlock()
			return nil, "", fmt.Errorf("add node %s: %w", name, err)
		}
		nw.owned = append(nw.owned, netns)
	}
	nw.mu.Unlock()

	ip := net.IPv4(nodeGateway[0], nodeGateway[1], nodeGateway[2], byte(host)).To4()
	veth := "tb" + strconv.Itoa(host) // the bridge side, in the control-plane namespace
	steps := [][]string{
		{"-n", nw.netns, "link", "add", veth, "type", "veth", "peer", "name", NodeInterface, "netns", netns},
		{"-n", nw.netns, "link", "set", veth, "master", "br0", "up"},
		{"-n", netns, "addr", "add", ip.String() + "/24", "dev", NodeInterface},
		{"-n", netns, "link", "set", NodeInterface, "up"},
		{"-n", netns, "link", "set", "lo", "up"},
	}
	if tb.opts.DualStack {
		// nodad: usable at once, not after duplicate address detection.
		steps = append(steps, []string{"-n", netns, "addr", "add", nodeIP6(host).String() + "/64", "dev", NodeInterface, "nodad"})
	}
	for i, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return nil, "", fmt.Errorf("add node %s: %w", name, err)
		}
		if i == 0 {
			nw.mu.Lock()
			nw.veths = append(nw.veths, veth)
			nw.mu.Unlock()
		}
	}
	return ip, netns, nil
}

// nodeIP6 is the IPv6 address of the node with host part host.
func nodeIP6(host int) net.IP {
	ip := net.ParseIP(NodeGateway6)
	ip[15] = byte(host)
	return ip
}

// NodeKubeconfig copies a kubeconfig written by the testbed (Kubeconfig,
// KubeconfigFor, ServiceAccountKubeconfig) with its server switched to
// NodeURL, for processes in node namespaces, and returns the copy's path.
func (tb *Testbed) NodeKubeconfig(ctx context.Context, kubeconfig string) (string, error) {
	if _, err := tb.ensureNetwork(ctx); err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("read kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = tb.NodeURL()
	}
	path := strings.TrimSuffix(kubeconfig, ".kubeconfig") + ".node.kubeconfig"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// Run runs a command inside the node's network namespace and returns its
// combined output.
func (n *Node) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	argv := append([]string{"netns", "exec", n.Netns, name}, args...)
	out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s in netns %s: %w: %s", name, n.Netns, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// ensureNetwork creates the control-plane namespace, bridge and relay once.
func (tb *Testbed) ensureNetwork(ctx context.Context) (*network, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock() // serialises creation; it takes milliseconds
	if tb.stopped {
		return nil, errors.New("node network: testbed stopped")
	}
	if tb.network != nil {
		return tb.network, nil
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("node network: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("node network: `ip` not found: install iproute2")
	}
	nw := &network{
		netns:  "nodedns-cp-" + randomToken()[:8],
		target: net.JoinHostPort(tb.host.String(), strconv.Itoa(tb.port)),
		conns:  map[net.Conn]struct{}{},
		next:   firstNodeHost,
	}
	if err := ipCmd(ctx, "netns", "add", nw.netns); err != nil {
		return nil, fmt.Errorf("node network: %w", err)
	}
	steps := [][]string{
		{"-n", nw.netns, "link", "set", "lo", "up"},
		{"-n", nw.netns, "link", "add", "br0", "type", "bridge"},
		{"-n", nw.netns, "addr", "add", NodeGateway + "/24", "dev", "br0"},
		{"-n", nw.netns, "link", "set", "br0", "up"},
	}
	if tb.opts.DualStack {
		steps = append(steps, []string{"-n", nw.netns, "addr", "add", NodeGateway6 + "/64", "dev", "br0", "nodad"})
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return nil, errors.Join(fmt.Errorf("node network: %w", err), nw.close())
		}
	}
	ln, err := listenInNetns(nw.netns, net.JoinHostPort(NodeGateway, strconv.Itoa(tb.port)))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("node network: %w", err), nw.close())
	}
	nw.ln = ln
	nw.wg.Add(1)
	go nw.serve()
	tb.network = nw
	return nw, nil
}

// serve accepts connections from node namespaces and relays each to
// kube-apiserver. TLS passes through untouched.
func (nw *network) serve() {
	defer nw.wg.Done()
	for {
		c, err := nw.ln.Accept()
		if err != nil {
			return // closed by close
		}
		nw.wg.Add(1)
		go nw.relay(c)
	}
}

func (nw *network) relay(c net.Conn) {
	defer nw.wg.Done()
	// Dialled from an ordinary goroutine: the socket is in the host namespace.
	u, err := net.Dial("tcp", nw.target)
	if err != nil {
		c.Close() // kube-apiserver restarting: the client retries
		return
	}
	if !nw.track(c, u) {
		c.Close()
		u.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
	<-done
	nw.untrack(c, u)
	c.Close()
	u.Close()
}

func (nw *network) track(cs ...net.Conn) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.closed {
		return false
	}
	for _, c := range cs {
		nw.conns[c] = struct{}{}
	}
	return true
}

func (nw *network) untrack(cs ...net.Conn) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, c := range cs {
		delete(nw.conns, c)
	}
}

// close stops the relay, deletes the veth pairs, the node namespaces AddNode
// created, and the control-plane namespace.
func (nw *network) close() error {
	nw.mu.Lock()
	nw.closed = true
	for c := range nw.conns {
		c.Close()
	}
	owned, veths := nw.owned, nw.veths
	nw.mu.Unlock()
	if nw.ln != nil {
		nw.ln.Close()
	}
	nw.wg.Wait()

	var errs []error
	ctx := context.Background() // teardown must run even when the test's context is done
	// Deleting a veth end deletes the pair at once; a deleted namespace
	// releases its devices only later, which would leave NodeInterface in a
	// namespace the caller passed to AddNode for a while.
	for _, v := range veths {
		errs = append(errs, ipCmd(ctx, "-n", nw.netns, "link", "delete", v))
	}
	for _, ns := range owned {
		errs = append(errs, ipCmd(ctx, "netns", "delete", ns))
	}
	errs = append(errs, ipCmd(ctx, "netns", "delete", nw.netns))
	return errors.Join(errs...)
}

// listenInNetns opens a TCP listener inside the named network namespace. A
// socket belongs to the namespace of the thread that created it, so the
// listener is made on a locked thread switched into netns and back.
func listenInNetns(netns, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + netns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open network namespace %s: %w", netns, err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter network namespace %s: %w", netns, err)}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		} // else: the goroutine exits still locked, and Go discards the thread
		if lerr != nil {
			lerr = fmt.Errorf("listen on %s in network namespace %s: %w", addr, netns, lerr)
		}
		ch <- result{ln, lerr}
	}()
	r := <-ch
	return r.ln, r.err
}

// ipCmd runs ip(8) with args.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
