// Package srcpolicy decides which clients the frontend answers. A DNS
// server on every node is a recursive resolver on every node; like
// unbound and BIND, the frontend answers only its own networks, so that a
// host that can reach a node's address (a node with a public address, a
// peered network, routed service ranges) gets no recursion and none of
// the cluster's names.
//
// A policy is a list of prefixes and, with the word "local", every source
// the node reaches without a gateway: loopback, the node's own addresses,
// its pods (a bridge's subnet, or the per-pod routes of Calico, Cilium or
// the AWS VPC CNI) and the subnets attached to its interfaces. That is
// asked of the kernel's routing table once per source and remembered for
// a while, so that a pod started a moment ago is answered without a list
// of pod networks that the frontend, with no API client, cannot read.
package srcpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
)

// Local is the word for the sources the node reaches without a gateway.
const Local = "local"

// Defaults of the cache of route answers.
const (
	// DefaultTTL is how long a source's answer is kept: a route change
	// (a pod deleted, its address reused elsewhere) takes effect within it.
	DefaultTTL = 30 * time.Second
	// DefaultMaxEntries bounds the remembered sources: 16,384 entries of
	// some 80 bytes. Past it, sources are asked of the kernel each time,
	// within the lookup budget.
	DefaultMaxEntries = 16384
	// DefaultLookupsPerSecond is the budget of route lookups: a flood of
	// queries from ever new addresses costs at most this many netlink
	// requests a second; beyond it new sources are refused until the
	// next second (a pod's resolver retries).
	DefaultLookupsPerSecond = 500
)

// Router answers whether addr is reached without a gateway.
type Router func(addr netip.Addr) (onLink bool, err error)

// Policy is a parsed --allow-networks. A nil *Policy allows every source.
type Policy struct {
	prefixes []netip.Prefix
	local    bool
	route    Router

	ttl        int64 // seconds
	maxEntries int64
	perSecond  int64

	cache   sync.Map // [16]byte → entry
	entries atomic.Int64
	budget  atomic.Int64 // lookups left in the current second
	second  atomic.Int64 // the second budget belongs to
	// now is a coarse clock, Unix seconds, advanced by Run: reading the
	// time per query would cost more than the rest of the check.
	now   atomic.Int64
	stats Stats
}

type entry struct {
	allowed bool
	until   int64
}

// Stats counts the policy's work, for metrics.
type Stats struct {
	Lookups     atomic.Int64 // route lookups made
	LookupFails atomic.Int64 // lookups that failed (the source is refused)
	OverBudget  atomic.Int64 // sources refused for want of lookup budget
}

// Parse reads a list of CIDR prefixes and the word "local". An empty list
// returns nil: every source is allowed.
func Parse(spec []string, route Router) (*Policy, error) {
	p := &Policy{route: route, ttl: int64(DefaultTTL / time.Second), maxEntries: DefaultMaxEntries, perSecond: DefaultLookupsPerSecond}
	p.now.Store(time.Now().Unix())
	var errs []error
	n := 0
	for _, s := range spec {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n++
		if s == Local {
			p.local = true
			continue
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			} else {
				errs = append(errs, fmt.Errorf("%q: not a CIDR prefix, an address or %q", s, Local))
				continue
			}
		}
		p.prefixes = append(p.prefixes, pfx.Masked())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if p.local && route == nil {
		return nil, fmt.Errorf("%q needs the routing table", Local)
	}
	return p, nil
}

// Stats returns the policy's counters.
func (p *Policy) Stats() *Stats { return &p.stats }

// String is the policy as given.
func (p *Policy) String() string {
	var s []string
	if p.local {
		s = append(s, Local)
	}
	for _, pfx := range p.prefixes {
		s = append(s, pfx.String())
	}
	return strings.Join(s, ",")
}

// Allowed reports whether src, a client address in 16-byte form (IPv4 as
// ::ffff:a.b.c.d), may be answered.
func (p *Policy) Allowed(src [16]byte) bool {
	if p == nil {
		return true
	}
	a := netip.AddrFrom16(src).Unmap()
	if a.IsLoopback() {
		return true
	}
	for _, pfx := range p.prefixes {
		if pfx.Contains(a) {
			return true
		}
	}
	if !p.local {
		return false
	}
	now := p.now.Load()
	if v, ok := p.cache.Load(src); ok {
		e := v.(entry)
		if now < e.until {
			return e.allowed
		}
	}
	if !p.spend(now) {
		p.stats.OverBudget.Add(1)
		return false
	}
	p.stats.Lookups.Add(1)
	onLink, err := p.route(a)
	if err != nil {
		p.stats.LookupFails.Add(1)
		onLink = false
	}
	if _, loaded := p.cache.Swap(src, entry{allowed: onLink, until: now + p.ttl}); !loaded {
		if p.entries.Add(1) > p.maxEntries {
			p.cache.Delete(src)
			p.entries.Add(-1)
		}
	}
	return onLink
}

// spend takes one lookup from the budget of second now.
func (p *Policy) spend(now int64) bool {
	if s := p.second.Load(); s != now && p.second.CompareAndSwap(s, now) {
		p.budget.Store(p.perSecond)
	}
	return p.budget.Add(-1) >= 0
}

// Run advances the policy's clock every second and forgets expired
// sources, until ctx ends. Without it the remembered answers never expire.
func (p *Policy) Run(ctx context.Context) {
	if p == nil || !p.local {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.now.Store(now.Unix())
			if now.Unix()%p.ttl == 0 {
				p.sweep()
			}
		}
	}
}

// sweep drops expired entries, so that sources seen once do not hold
// cache entries forever.
func (p *Policy) sweep() {
	now := p.now.Load()
	p.cache.Range(func(k, v any) bool {
		if now >= v.(entry).until {
			if _, ok := p.cache.LoadAndDelete(k); ok {
				p.entries.Add(-1)
			}
		}
		return true
	})
}

// KernelRouter is the Router of a real node: addr is reached without a
// gateway when the kernel's route to it (RTM_GETROUTE, as `ip route get`)
// is a local one (the node's own address) or a direct one (a connected
// subnet, a pod's host route), not one through a next hop.
func KernelRouter(a netip.Addr) (bool, error) {
	routes, err := netlink.RouteGet(net.IP(a.AsSlice()))
	if err != nil {
		return false, err
	}
	if len(routes) == 0 {
		return false, errors.New("no route")
	}
	for _, r := range routes {
		if r.Gw != nil || r.Via != nil || len(r.MultiPath) > 0 {
			return false, nil
		}
	}
	return true, nil
}
