// Package bindlist is the nodedns_bind directive: CoreDNS's bind for
// address lists as the downward API gives them. A pod's status.hostIPs
// is one string, "10.0.0.5,fd00::5" on a dual-stack node; Caddy replaces
// an environment variable ({$NAME}) inside a single token, so bind would
// take that string as one address and refuse it. nodedns_bind splits each
// argument at commas and listens on every address once:
//
//	nodedns_bind ADDR[,ADDR...] [ADDR...]
//
// Empty items are skipped; an item that is not an IP address fails the
// Corefile with its value named. Interface names and bind's except are
// not taken: the chart gives addresses. It sets only where the server
// block listens and is not in the query path.
package bindlist

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
)

// Name is the directive.
const Name = "nodedns_bind"

func init() { plugin.Register(Name, setup) }

func setup(c *caddy.Controller) error {
	var all []string
	for c.Next() {
		args := c.RemainingArgs()
		if len(args) == 0 {
			return plugin.Error(Name, c.ArgErr())
		}
		addrs, err := Parse(args)
		if err != nil {
			return plugin.Error(Name, err)
		}
		for _, a := range addrs {
			if !slices.Contains(all, a) {
				all = append(all, a)
			}
		}
	}
	if len(all) == 0 {
		return plugin.Error(Name, fmt.Errorf("no address to listen on (an empty variable?)"))
	}
	dnsserver.GetConfig(c).ListenHosts = all
	return nil
}

// Parse splits args at commas into distinct IP addresses, in order,
// skipping empty items.
func Parse(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		for _, item := range strings.Split(a, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			ip, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not an IP address (in %q)", item, a)
			}
			if s := ip.String(); !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
