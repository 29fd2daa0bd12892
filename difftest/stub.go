package difftest

import (
	"strings"

	"github.com/miekg/dns"
)

// ndots is kubelet's for pods with dnsPolicy ClusterFirst.
const ndots = 5

// Clients: how a lookup turns into queries.
const (
	glibc  = "glibc"  // getaddrinfo (A and AAAA) or res_search (any type), search list
	musl   = "musl"   // getaddrinfo (A and AAAA) with the search list; res_search is res_query in musl
	direct = "direct" // the name as it is (dig, an application asking an FQDN)
)

// lookup is what an application asks its stub resolver.
type lookup struct {
	client string
	name   string   // as the application gives it, maybe relative, maybe with a trailing dot
	qtypes []uint16 // A and AAAA for getaddrinfo, else one type
	ns     string   // the pod's namespace: search NS.svc.DOMAIN svc.DOMAIN DOMAIN
	edns   uint16   // 0: no OPT record; else the advertised UDP size
	do, cd bool
}

// searchList is kubelet's search path for a pod of namespace ns.
func searchList(ns, domain string) []string {
	return []string{ns + ".svc." + domain, "svc." + domain, domain}
}

// candidates returns the names the stub resolver asks, in order:
//   - glibc (resolv/res_query.c, __res_context_search): a name ending in a
//     dot as it is, alone; a name with ndots dots or more as it is first,
//     then with each search domain; else with each search domain, then as
//     it is.
//   - musl (src/network/lookup_name.c, name_from_dns_search): a name ending
//     in a dot or with ndots dots or more as it is, alone; else with each
//     search domain, then as it is. musl's res_search is res_query: no
//     search list for the other types.
//   - direct: as it is.
func candidates(l lookup, domain string) []string {
	name := strings.TrimSuffix(l.name, ".")
	asIs := dns.Fqdn(name)
	if strings.HasSuffix(l.name, ".") || l.client == direct {
		return []string{asIs}
	}
	dots := strings.Count(name, ".")
	var searched []string
	for _, s := range searchList(l.ns, domain) {
		searched = append(searched, dns.Fqdn(name+"."+s))
	}
	switch l.client {
	case musl:
		if dots >= ndots || !isAddr(l.qtypes) {
			return []string{asIs}
		}
		return append(searched, asIs)
	default: // glibc
		if dots >= ndots {
			return append([]string{asIs}, searched...)
		}
		return append(searched, asIs)
	}
}

func isAddr(qtypes []uint16) bool {
	return len(qtypes) == 2 && qtypes[0] == dns.TypeA && qtypes[1] == dns.TypeAAAA
}

// next reports whether the stub resolver goes on to its next candidate
// after the answers to one (one per type; nil: no answer, a timeout).
//   - glibc goes on after NXDOMAIN, NODATA (NOERROR without answer
//     records) and SERVFAIL, in every answer; a timeout ends the lookup.
//   - musl (name_from_dns) reads the answers in order: SERVFAIL or no
//     answer ends the lookup (EAI_AGAIN), NXDOMAIN goes on, another error
//     ends it; when all are NOERROR the lookup ends, with addresses or
//     without (EAI_NODATA): a name that exists stops musl's search.
func next(client string, answers []*dns.Msg) bool {
	switch client {
	case direct:
		return false
	case musl:
		for _, a := range answers {
			if a == nil {
				return false
			}
			switch a.Rcode {
			case dns.RcodeNameError:
				return true
			case dns.RcodeSuccess:
			default:
				return false
			}
		}
		return false
	default:
		for _, a := range answers {
			if a == nil {
				return false
			}
			switch {
			case a.Rcode == dns.RcodeSuccess && len(a.Answer) > 0:
				return false
			case a.Rcode == dns.RcodeSuccess, a.Rcode == dns.RcodeNameError, a.Rcode == dns.RcodeServerFailure:
			default:
				return false
			}
		}
		return true
	}
}

// query is the message the stub resolver sends for name and qtype.
func (l lookup) query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = dns.Id()
	m.RecursionDesired = true
	m.CheckingDisabled = l.cd
	if l.edns != 0 {
		m.SetEdns0(l.edns, l.do)
	}
	return m
}
