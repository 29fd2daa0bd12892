package netnstest

import (
	"strings"
	"testing"
)

// Addresses of the NodePod topology: the pod's veth network, like a CNI's
// per-node pod CIDR.
const (
	NodeVethIP  = "10.244.1.1"
	PodIP       = "10.244.1.2"
	NodeVethIP6 = "fd00:244:1::1"
	PodIP6      = "fd00:244:1::2"
)

// Topology is a node and one of its pods.
type Topology struct {
	Node *NetNS
	Pod  *NetNS
}

// NodePod creates a "node" and a "pod" namespace joined by a veth pair
// (eth0 in the pod, a veth named "pod0" on the node), dual-stack, with the
// pod's default routes via the node and forwarding on in the node, as a CNI
// plugin would set them up.
func NodePod(t testing.TB) *Topology {
	t.Helper()
	node, pod := New(t, "node"), New(t, "pod")
	Link(t, node, "pod0", []string{NodeVethIP + "/24", NodeVethIP6 + "/64"},
		pod, "eth0", []string{PodIP + "/24", PodIP6 + "/64"})
	pod.Run("ip", "route", "add", "default", "via", NodeVethIP)
	pod.Run("ip", "-6", "route", "add", "default", "via", NodeVethIP6)
	node.Sysctl("net.ipv4.ip_forward", "1")
	node.Sysctl("net.ipv6.conf.all.forwarding", "1")
	return &Topology{Node: node, Pod: pod}
}

// Link joins a and b with a veth pair named aName in a and bName in b,
// assigns the addresses (CIDR notation; IPv6 ones without duplicate address
// detection so they are usable at once) and sets both ends up.
func Link(t testing.TB, a *NetNS, aName string, aAddrs []string, b *NetNS, bName string, bAddrs []string) {
	t.Helper()
	a.Run("ip", "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name)
	for _, side := range []struct {
		ns    *NetNS
		name  string
		addrs []string
	}{{a, aName, aAddrs}, {b, bName, bAddrs}} {
		for _, addr := range side.addrs {
			args := []string{"addr", "add", addr, "dev", side.name}
			if strings.Contains(addr, ":") {
				args = append(args, "nodad")
			}
			side.ns.Run("ip", args...)
		}
		side.ns.Run("ip", "link", "set", side.name, "up")
	}
}
