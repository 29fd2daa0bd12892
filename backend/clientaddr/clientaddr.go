// Package clientaddr is the backend's nodedns_client plugin: it makes the
// pod that asked the frontend the source of the query that the frontend
// sends on its behalf, so that the plugins after it (log, acl, anything
// that reads the source) see pods rather than the frontend's loopback
// address.
//
// The frontend (--pass-client-address) puts the pod's address in an EDNS0
// option of each miss (shared/clientopt). This plugin removes every copy
// of that option from every query, whoever sent it, and, only when the
// query came from a trusted source, answers it through a ResponseWriter
// whose RemoteAddr is the pod's (same transport, port 0).
//
// Trust: by default a query is trusted when it came over TCP from a
// loopback address. The frontend reaches its backend only over TCP on
// loopback, and pods, each in its own network namespace, cannot reach the
// node's loopback; CoreDNS's own relays (forward) and stub resolvers use
// UDP first. On a host-network pod's loopback any process of the node
// could claim an address: where that matters, list the frontend's source
// address alone (nodedns_client 127.0.0.1/32). "nodedns_client none"
// trusts nobody and only removes the option: the fallback listener uses it,
// so that another node's frontend cannot pass an address through the
// listener's relay into the main server block.
package clientaddr

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/clientopt"
)

// Name is the plugin's directive.
const Name = "nodedns_client"

func init() { plugin.Register(Name, setup) }

// Client is the plugin.
type Client struct {
	Next plugin.Handler
	// trusted lists the source networks whose queries are believed; nil
	// trusts nobody. Only TCP queries are believed.
	trusted []netip.Prefix
}

// loopback is the default trust.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func setup(c *caddy.Controller) error {
	cl, err := parse(c)
	if err != nil {
		return plugin.Error(Name, err)
	}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		cl.Next = next
		return cl
	})
	return nil
}

// parse reads "nodedns_client [none | CIDR...]".
func parse(c *caddy.Controller) (*Client, error) {
	cl := &Client{}
	seen := false
	for c.Next() {
		if seen {
			return nil, fmt.Errorf("given twice in one server block")
		}
		seen = true
		args := c.RemainingArgs()
		if c.NextBlock() {
			return nil, fmt.Errorf("takes no block: nodedns_client [none | CIDR...]")
		}
		switch {
		case len(args) == 0:
			cl.trusted = loopback
		case len(args) == 1 && args[0] == "none":
			cl.trusted = nil
		default:
			for _, a := range args {
				p, err := netip.ParsePrefix(a)
				if err != nil {
					return nil, fmt.Errorf("%q: want none, or CIDRs of the frontend's source address: %w", a, err)
				}
				cl.trusted = append(cl.trusted, p.Masked())
			}
		}
	}
	return cl, nil
}

// Name implements plugin.Handler.
func (cl *Client) Name() string { return Name }

// ServeDNS implements plugin.Handler.
func (cl *Client) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	addr, ok := clientopt.Take(r)
	if ok && cl.trust(w.RemoteAddr()) {
		w = &writer{ResponseWriter: w, remote: &net.TCPAddr{IP: addr.AsSlice()}}
	}
	return plugin.NextOrFailure(cl.Name(), cl.Next, ctx, w, r)
}

// trust reports whether a query from a may name its client.
func (cl *Client) trust(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(t.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range cl.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// writer is the query's ResponseWriter with the pod as its remote end.
type writer struct {
	dns.ResponseWriter
	remote net.Addr
}

// RemoteAddr implements dns.ResponseWriter.
func (w *writer) RemoteAddr() net.Addr { return w.remote }
