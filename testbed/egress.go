package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The API server's way into the cluster. kube-apiserver runs in the host's
// network namespace, where neither the node IPs (kubelet's :10250: logs,
// exec, attach, port-forward, nodes/proxy) nor the pod IPs (pods/proxy,
// services/proxy) are routed. Its egress selector sends every "cluster"
// connection as an HTTP CONNECT over a Unix socket to egressProxy, which
// dials node, pod and ClusterIP addresses from the control-plane namespace
// (routes to every PodCIDR via its node and to ServiceCIDR via the first
// node, see routePodCIDRs) and any other address from the host namespace,
// as kube-apiserver itself would have. Nothing is added to the host's
// links, addresses or routes.
//
//	kube-apiserver ──CONNECT 172.31.254.11:10250 / 10.244.1.5:80──► egress.sock (test process)
//	    ──dial from cp netns──► br0 ──► node netns: kubelet, or cni0 ──► pod

// egressConfigFile is kube-apiserver's --egress-selector-config-file in
// tb.Dir; egressSocketFile is the proxy's Unix socket.
const (
	egressConfigFile = "egress-selector.yaml"
	egressSocketFile = "egress.sock"
)

// egressDialTimeout bounds one dial: node and pod addresses answer or
// refuse within milliseconds on the bridge; a missing route fails at once.
const egressDialTimeout = 10 * time.Second

// maxUnixPath is the longest path a Unix socket may bind on Linux
// (sun_path holds 108 bytes with the terminating NUL).
const maxUnixPath = 107

// clusterNets are the destinations dialled from the control-plane
// namespace: the node subnet (kubelets), the pods' subnet, and ClusterIPs
// (routed via the first real node; unreachable, never the host's default
// route, before one exists).
var clusterNets = mustCIDRs(NodeSubnet, PodSubnet, ServiceCIDR)

// egressProxy serves HTTP CONNECT on a Unix socket for kube-apiserver's
// "cluster" egress selection.
type egressProxy struct {
	path  string
	ln    net.Listener
	netns func() string // the control-plane namespace, or "" before AddNode

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // serve and tunnel goroutines
}

// egressConfig is the EgressSelectorConfiguration sending "cluster"
// traffic to socket; "controlplane" and "etcd" stay direct.
func egressConfig(socket string) string {
	return fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %q
`, socket)
}

// startEgress writes the egress selector configuration and starts the
// proxy it names. The socket lives in tb.Dir, or in a short directory of
// its own when tb.Dir is too long for a socket path.
func (tb *Testbed) startEgress() error {
	path := filepath.Join(tb.Dir, egressSocketFile)
	if len(path) > maxUnixPath {
		dir, err := os.MkdirTemp("", "nodedns-egress-")
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		tb.egressDir = dir
		path = filepath.Join(dir, egressSocketFile)
	}
	p, err := newEgressProxy(path, tb.controlPlaneNetns)
	if err != nil {
		return err
	}
	tb.egress = p
	return writeFile(filepath.Join(tb.Dir, egressConfigFile), []byte(egressConfig(path)))
}

// newEgressProxy serves CONNECT on the Unix socket path; netns names the
// namespace cluster addresses are dialled from ("" while there is none).
func newEgressProxy(path string, netns func() string) (*egressProxy, error) {
	_ = os.Remove(path) // a socket left by an earlier testbed in the same Dir
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := &egressProxy{path: path, ln: ln, netns: netns, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// controlPlaneNetns returns the control-plane namespace once AddNode or
// AddRealNode has made it, else "".
func (tb *Testbed) controlPlaneNetns() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.network == nil {
		return ""
	}
	return tb.network.netns
}

func (p *egressProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed by close
		}
		p.wg.Add(1)
		go p.tunnel(c)
	}
}

// tunnel answers one CONNECT: it dials the target, replies 200 and copies
// bytes both ways until either side closes. kube-apiserver sends nothing
// after the request before the reply, and reads nothing buffered after it.
func (p *egressProxy) tunnel(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	_ = c.SetReadDeadline(time.Now().Add(egressDialTimeout))
	req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 64<<10)))
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Method != http.MethodConnect {
		fmt.Fprintf(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), egressDialTimeout)
	u, err := p.dial(ctx, req.Host)
	cancel()
	if err != nil {
		msg := err.Error()
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return
	}
	defer u.Close()
	if !p.track(u) {
		return
	}
	defer p.untrack(u)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
	<-done
}

// dial connects to addr (host:port): from the control-plane namespace when
// the host is an address of clusterNets, else from this process's own.
func (p *egressProxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: bad CONNECT target %q: %w", addr, err)
	}
	var d net.Dialer
	ip := net.ParseIP(host)
	if ip == nil || !inNets(ip, clusterNets) {
		return d.DialContext(ctx, "tcp", addr)
	}
	netns := p.netns()
	if netns == "" {
		return nil, fmt.Errorf("egress: %s is a cluster address, but no node network exists yet", addr)
	}
	var conn net.Conn
	err = inNetns(netns, func() error {
		var derr error
		conn, derr = d.DialContext(ctx, "tcp", addr)
		return derr
	})
	if err != nil {
		return nil, fmt.Errorf("egress: dial %s from %s: %w", addr, netns, err)
	}
	return conn, nil
}

func (p *egressProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *egressProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// close stops accepting, ends every tunnel and removes the socket.
func (p *egressProxy) close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close() // removes the socket file too
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("egress proxy: %w", err)
	}
	return nil
}

func inNets(ip net.IP, nets []*net.IPNet) bool {
	for _, n := range nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

func mustCIDRs(cidrs ...string) []*net.IPNet {
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(fmt.Sprintf("bad CIDR constant %q: %v", c, err))
		}
		out = append(out, n)
	}
	return out
}
