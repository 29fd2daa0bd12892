package server

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// Shared sources.
//
// A pod with an address of its own is one client. The node's own
// addresses are many: every hostNetwork pod (CNI agents, node exporters,
// ingress controllers on host ports), kubelet and the node's processes
// send from the node IP, from 127.0.0.1, or (asking 169.254.20.10 or the
// kube-dns ClusterIP that the frontend owns) from that very address, the
// kernel's source for a local destination. Such a source gets
// sharedShareDiv of each budget instead of a pod's share: a share that
// stands for several clients, since nothing tells how many are behind it,
// and not exemption, since a hostNetwork process asking names of many
// slow domains would otherwise take the whole budget from the pods. The
// per-domain shares (domains.go) apply to it as to every source, so a
// slow domain asked from the node takes at most its own share of it.
//
// Only 127.0.0.1 and ::1 of the loopback ranges count: the kernel picks
// them for a local client that binds no address, while other 127/8
// addresses come from clients that chose them (tests use them as pods).

// sharedShareDiv is the divisor of MaxInflight and MaxTCPConns that a
// shared source may hold: a half, four pods' shares at the default
// DefaultSourceShare, still leaving the other half to the pods.
const sharedShareDiv = 2

// localRefresh is how often the node's addresses are read again: a node
// IP added after the start (DHCP, a CNI bridge) is shared within this.
const localRefresh = 10 * time.Second

// localAddrs is the set of the node's own addresses, replaced whole on
// each refresh and read without a lock.
type localAddrs struct {
	set    atomic.Pointer[map[srcKey]struct{}]
	listen []srcKey // the listen addresses, always local
}

func newLocalAddrs(listen []string) *localAddrs {
	l := &localAddrs{}
	for _, a := range listen {
		if ap, err := netip.ParseAddrPort(a); err == nil {
			l.listen = append(l.listen, srcKey(ap.Addr().As16()))
		}
	}
	l.refresh()
	return l
}

// refresh reads the interfaces' addresses again. An error keeps the last
// set: shares stay as they were rather than shrink.
func (l *localAddrs) refresh() {
	m := map[srcKey]struct{}{
		v4Key([4]byte{127, 0, 0, 1}):        {},
		srcKey(netip.IPv6Loopback().As16()): {},
	}
	for _, k := range l.listen {
		m[k] = struct{}{}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil && l.set.Load() != nil {
		return
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || ip.Unmap().IsLoopback() {
			continue // 127.0.0.1 and ::1 only, above
		}
		m[srcKey(ip.As16())] = struct{}{}
	}
	l.set.Store(&m)
}

// has reports whether k is one of the node's addresses.
func (l *localAddrs) has(k srcKey) bool {
	_, ok := (*l.set.Load())[k]
	return ok
}

// keepFresh refreshes the set every localRefresh until ctx ends.
func (l *localAddrs) keepFresh(ctx context.Context) {
	t := time.NewTicker(localRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.refresh()
		}
	}
}
