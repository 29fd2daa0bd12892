// Package clientopt is the EDNS0 option by which the frontend tells its
// backend which pod asked a question it could not answer from its cache:
// a local option (RFC 6891 section 9 reserves 65001-65534 for local use)
// whose data is the client's address, 4 bytes for IPv4, 16 for IPv6.
//
// A private code rather than EDNS Client Subnet (RFC 7871, code 8): ECS
// means something to every resolver on the way (answers scoped to the
// subnet, caches keyed by it, upstream servers tailoring answers), a pod
// may send its own, and CoreDNS's forward passes it on. No software but
// nodedns sets this code, so the backend can tell it from anything a
// client sends, and the frontend never forwards a client's options (it
// builds each backend query afresh).
package clientopt

import (
	"net/netip"

	"github.com/miekg/dns"
)

// Code is the option's code.
const Code = 65053

// Option returns the option carrying client's address.
func Option(client netip.Addr) *dns.EDNS0_LOCAL {
	return &dns.EDNS0_LOCAL{Code: Code, Data: client.Unmap().AsSlice()}
}

// Take removes every copy of the option from m's OPT record and returns
// the address of the last valid one; false when there was none.
func Take(m *dns.Msg) (netip.Addr, bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return netip.Addr{}, false
	}
	var addr netip.Addr
	found := false
	kept := opt.Option[:0]
	for _, o := range opt.Option {
		if o.Option() != Code {
			kept = append(kept, o)
			continue
		}
		if l, ok := o.(*dns.EDNS0_LOCAL); ok {
			if a, ok := netip.AddrFromSlice(l.Data); ok {
				addr, found = a.Unmap(), true
			}
		}
	}
	clear(opt.Option[len(kept):])
	opt.Option = kept
	return addr, found
}

// Has reports whether m carries the option.
func Has(m *dns.Msg) bool {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if o.Option() == Code {
				return true
			}
		}
	}
	return false
}

// Without returns m, or when m carries the option a copy of m without it
// (m itself is left as it is).
func Without(m *dns.Msg) *dns.Msg {
	if !Has(m) {
		return m
	}
	c := *m
	c.Extra = make([]dns.RR, len(m.Extra))
	for i, rr := range m.Extra {
		if opt, ok := rr.(*dns.OPT); ok {
			o := *opt
			o.Option = nil
			for _, e := range opt.Option {
				if e.Option() != Code {
					o.Option = append(o.Option, e)
				}
			}
			rr = &o
		}
		c.Extra[i] = rr
	}
	return &c
}
