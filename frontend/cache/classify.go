package cache

import (
	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/frontend/dnswire"
)

// classify returns the kind of answer m is and the largest TTL its records
// may keep. m's question is the one the entry is keyed by.
func (c *Cache) classify(m *dns.Msg) (Kind, uint32) {
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
		if m.Rcode == dns.RcodeSuccess && answers(m.Answer, m.Question[0]) {
			return Success, secs(c.cfg.MaxTTL)
		}
		// NXDOMAIN, and NODATA even behind a CNAME chain, which denies the
		// chain's last name (RFC 2308 §2.1, §2.2, RFC 6604 §3). RFC 2308 §5:
		// the negative TTL is the smaller of the SOA's TTL and its MINIMUM
		// field; a negative answer without an SOA is not cached. That
		// includes a chain left incomplete by the backend: stored, it would
		// be replayed as a full answer.
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				t := min(soa.Hdr.Ttl, soa.Minttl, secs(c.cfg.NegativeMaxTTL))
				if c.cfg.ClusterDomain != "" && dns.IsSubDomain(c.cfg.ClusterDomain, m.Question[0].Name) {
					t = min(t, secs(c.cfg.ClusterNegativeMaxTTL))
				}
				return Denial, max(t, secs(c.cfg.MinTTL))
			}
		}
		return noCache, maxTTL
	case dns.RcodeServerFailure:
		if c.cfg.ServfailTTL == 0 || c.cfg.NegativeSize == 0 {
			return noCache, maxTTL
		}
		return ServFail, secs(c.cfg.ServfailTTL)
	}
	return noCache, maxTTL
}

// answers reports whether the answer section holds records of q's type at
// the end of the CNAME chain that starts at q's name (RFC 1034 §3.6.2: a
// resolver restarts the query at a CNAME's target, and a DNAME comes with
// the CNAME it synthesizes, RFC 6672 §3.4). A CNAME or ANY query is
// answered by any record of its type, or any record, at the name itself. A
// chain that loops or forks (an alias with two targets, RFC 2181 §10.1)
// answers nothing.
func answers(rrs []dns.RR, q dns.Question) bool {
	name := q.Name
	// Each step follows one CNAME, so a chain longer than the section
	// has looped.
	for range len(rrs) + 1 {
		var target string
		for _, rr := range rrs {
			h := rr.Header()
			if !dnswire.EqualName(h.Name, name) {
				continue
			}
			if h.Rrtype == q.Qtype || q.Qtype == dns.TypeANY {
				return true
			}
			if cn, ok := rr.(*dns.CNAME); ok {
				if target != "" && !dnswire.EqualName(target, cn.Target) {
					return false
				}
				target = cn.Target
			}
		}
		if target == "" {
			return false
		}
		name = target
	}
	return false
}
