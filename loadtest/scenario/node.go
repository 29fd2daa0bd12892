package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/testbed"
)

// simNode is one Kubernetes node: a node namespace known to the API
// server (testbed AddNode) running kube-proxy in iptables mode, a pod
// namespace holding the addresses of many pods behind a veth (as a CNI
// would), and a link toward the other node.
//
//	pod netns (eth0 10.244.N.2-…) ─veth─ node netns (pod0 10.244.N.1; lt0 10.1.N.1) ─veth─ other node (10.1.N.2; 10.0.0.2, 10.0.0.3)
//	                                          └ testbed0 172.31.254.x ── control plane (API server)
type simNode struct {
	*testbed.Node
	Pod    netnstest.Namespace
	PodIPs []netip.Addr
	// NoisyIP is one more pod's address in Pod, not among PodIPs: the
	// pod that floods the node in the chaos experiment of one pod.
	NoisyIP netip.Addr
	// Uplink is NodeUplink's address; the other node's end is Peer.
	Uplink, Peer string
	kp           *testbed.KubeProxy
	teardown     []func() error
}

// addNode builds node number n+1 of the run.
func (e *Env) addNode(ctx context.Context, name string) (_ *simNode, err error) {
	e.nodes++
	n := e.nodes
	if n > 200 {
		return nil, errors.New("more than 200 nodes in one run")
	}
	tn, err := e.tb.AddNode(ctx, name, "")
	if err != nil {
		return nil, err
	}
	s := &simNode{Node: tn}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	s.teardown = append(s.teardown, func() error { inNetns(tn.Netns).KillProcs(); return nil })
	if s.Pod, err = netnstest.Create(ctx, "nodedns-lt-pod"); err != nil {
		return nil, err
	}
	s.teardown = append(s.teardown, s.Pod.Delete)
	sub := strconv.Itoa(n)
	podNet := "10.244." + sub
	s.Uplink, s.Peer = "10.1."+sub+".1", "10.1."+sub+".2"
	peerIf := "n" + sub
	central := e.central.Netns
	steps := [][]string{
		{"-n", tn.Netns, "link", "add", "pod0", "type", "veth", "peer", "name", "eth0", "netns", s.Pod.Name},
		{"-n", tn.Netns, "addr", "add", podNet + ".1/24", "dev", "pod0"},
		{"-n", tn.Netns, "link", "set", "pod0", "up"},
		{"-n", s.Pod.Name, "link", "set", "eth0", "up"},
		{"-n", tn.Netns, "link", "add", NodeUplink, "type", "veth", "peer", "name", peerIf, "netns", central},
		{"-n", tn.Netns, "addr", "add", s.Uplink + "/30", "dev", NodeUplink},
		{"-n", tn.Netns, "link", "set", NodeUplink, "up"},
		{"-n", central, "addr", "add", s.Peer + "/30", "dev", peerIf},
		{"-n", central, "link", "set", peerIf, "up"},
		{"-n", central, "route", "add", podNet + ".0/24", "via", s.Uplink},
		{"-n", tn.Netns, "route", "add", "10.0.0.0/24", "via", s.Peer},
		// The other node's own address (nodedns's second fallback
		// endpoint) over the same link, not over the control plane's.
		{"-n", tn.Netns, "route", "add", e.central.IP.String() + "/32", "via", s.Peer},
		// ClusterIPs have no route of their own on a node; locally sent
		// packets need one before kube-proxy's OUTPUT DNAT rewrites them.
		{"-n", tn.Netns, "route", "add", testbed.ServiceCIDR, "via", s.Peer},
	}
	addr := netip.MustParseAddr(podNet + ".2")
	for range e.opts.Pods {
		s.PodIPs = append(s.PodIPs, addr)
		steps = append(steps, []string{"-n", s.Pod.Name, "addr", "add", addr.String() + "/24", "dev", "eth0"})
		addr = addr.Next()
	}
	s.NoisyIP = addr
	steps = append(steps, []string{"-n", s.Pod.Name, "addr", "add", addr.String() + "/24", "dev", "eth0"})
	steps = append(steps, []string{"-n", s.Pod.Name, "route", "add", "default", "via", podNet + ".1"})
	for _, st := range steps {
		if _, err := run(ctx, "ip", st...); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	s.teardown = append(s.teardown, func() error {
		_, err := run(context.Background(), "ip", "-n", central, "link", "del", peerIf)
		return err
	})
	if _, err := run(ctx, "ip", "netns", "exec", tn.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return nil, err
	}
	if s.kp, err = e.tb.StartKubeProxy(ctx, tn, testbed.ProxyModeIPTables); err != nil {
		return nil, err
	}
	s.teardown = append(s.teardown, s.kp.Stop)
	if _, err := s.kp.WaitForRules(ctx, testbed.DNSServiceIP, UpstreamServiceIP); err != nil {
		return nil, fmt.Errorf("kube-proxy on %s: %w", name, err)
	}
	return s, nil
}

// Close stops what runs on the node and removes its pod namespace and
// link; the testbed deletes the node namespace itself.
func (s *simNode) Close() error {
	var errs []error
	for i := len(s.teardown) - 1; i >= 0; i-- {
		errs = append(errs, s.teardown[i]())
	}
	s.teardown = nil
	return errors.Join(errs...)
}

// node runs a command in the node namespace.
func (s *simNode) exec(ctx context.Context, name string, args ...string) (string, error) {
	return run(ctx, "ip", append([]string{"netns", "exec", s.Netns, name}, args...)...)
}
