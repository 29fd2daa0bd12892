package difftest

import (
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// generator draws lookups: pods' getaddrinfo and res_search walks and
// direct queries, over names the cluster has, had, will have and never
// has, names the upstream answers and denies, random and mixed-case names.
type generator struct {
	domain string // cluster domain, no trailing dot

	mu      sync.Mutex
	dynamic []string // Service names created (and maybe deleted) by the rounds, in namespace dtA
	reverse []string // reverse names of the cluster's addresses
}

// Relative names a pod asks by getaddrinfo. Some have five dots or more,
// so the stub resolvers ask them as they are first.
var relNames = []string{
	"web", "db", "anon", "ext", "alias", "v6", "lonely", "empty-headless", "com", "kubernetes",
	"web." + nsB, "db." + nsA, "web." + nsEmpty, "web.nosuch", "www.com", "web.com",
	"web." + nsA + ".svc", "kubernetes.default", "kubernetes.default.svc",
	"db-0.db", "db-1.db", "db-2.db", "db-0.db." + nsB, "db-9.db",
	"10-1-0-1." + nsA + ".pod", "10-2-0-1.anon", "10-2-0-5.anon",
	"www.example.com", "api.example.com", "example.com", "www.example.net", "example.net",
	"host.corp.example", "x.legacy.cluster.local", "legacy." + nsA + ".svc.cluster.local",
	"old-web." + nsA + ".svc.cluster.local", "a.corp.internal", "b.corp.internal",
	"web." + nsA + ".svc.cluster.local", "db-0.db." + nsA + ".svc.cluster.local",
	"ns.dns", "ns.dns.cluster.local", "dns-version.cluster.local",
}

// srvNames are asked by res_search for SRV.
var srvNames = []string{
	"_http._tcp.web", "_dns._udp.web", "_pg._tcp.db", "_http._udp.web", "_http._tcp.web." + nsB,
	"_http._tcp.anon", "_http._tcp.lonely", "_http._tcp.web." + nsA + ".svc.cluster.local",
	"_pg._tcp.db." + nsA + ".svc.cluster.local", "_x._tcp.nosuch", "_http._tcp.www.example.com",
}

// fqdns are asked as they are, with every type.
var fqdns = []string{
	"cluster.local.", "svc.cluster.local.", "pod.cluster.local.", "dns.cluster.local.",
	"ns.dns.cluster.local.", "x.ns.dns.cluster.local.", "dns-version.cluster.local.",
	nsA + ".svc.cluster.local.", nsEmpty + ".svc.cluster.local.", "com.svc.cluster.local.",
	"nosuch.svc.cluster.local.", "x.nosuch.svc.cluster.local.", "x.y.nosuch.svc.cluster.local.",
	"web." + nsA + ".svc.cluster.local.", "web." + nsEmpty + ".svc.cluster.local.",
	"x.web." + nsA + ".svc.cluster.local.", "_tcp.web." + nsA + ".svc.cluster.local.",
	"_http._tcp.web." + nsA + ".svc.cluster.local.", "_dns._udp.web." + nsA + ".svc.cluster.local.",
	"db-0.db." + nsA + ".svc.cluster.local.", "db-2.db." + nsA + ".svc.cluster.local.",
	"x.db-0.db." + nsA + ".svc.cluster.local.", "10-2-0-5.anon." + nsA + ".svc.cluster.local.",
	"10-1-0-1." + nsA + ".pod.cluster.local.", "10-1-0-1.nosuch.pod.cluster.local.",
	"x.10-1-0-1." + nsA + ".pod.cluster.local.", "fd00--1." + nsA + ".pod.cluster.local.",
	"svc." + nsA + ".svc.cluster.local.", "pod.svc.cluster.local.", "www.com.svc.cluster.local.",
	"x.svc.cluster.local.", "x.pod.cluster.local.", "x.cluster.local.", "com.cluster.local.",
	"legacy.cluster.local.", "x.legacy.cluster.local.", "legacy." + nsA + ".svc.cluster.local.",
	"www.example.com.", "example.com.", "x.www.example.com.", "example.net.", "www.example.org.",
	"host.corp.example.", "a.corp.internal.", "corp.internal.", "in-addr.arpa.", "ip6.arpa.",
	"10.in-addr.arpa.", "96.10.in-addr.arpa.",
}

var allTypes = []uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeCNAME, dns.TypeANY,
	dns.TypeMX, dns.TypeNS, dns.TypeSOA,
}

// searchTypes are what applications ask by res_search besides addresses.
var searchTypes = []uint16{dns.TypeSRV, dns.TypeTXT, dns.TypeCNAME, dns.TypeANY, dns.TypeMX, dns.TypePTR}

func (g *generator) addDynamic(name string) {
	g.mu.Lock()
	g.dynamic = append(g.dynamic, name)
	g.mu.Unlock()
}

func (g *generator) setReverse(names []string) {
	g.mu.Lock()
	g.reverse = names
	g.mu.Unlock()
}

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// label is a random DNS label of 1 to 12 letters, digits and hyphens.
func label(r *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	n := 1 + r.IntN(12)
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[r.IntN(len(chars))]
		if i > 0 && i < n-1 && r.IntN(10) == 0 {
			b[i] = '-'
		}
	}
	return string(b)
}

// mixCase upper-cases letters of name at random (what 0x20 senders and
// some applications do).
func mixCase(r *rand.Rand, name string) string {
	b := []byte(name)
	for i, c := range b {
		if c >= 'a' && c <= 'z' && r.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// randomName is a name nobody has: under the pod's search domains it is
// no Service, and upstream it is NXDOMAIN (or an example.com name).
func randomName(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return label(r)
	case 1:
		return label(r) + "." + label(r)
	case 2:
		return label(r) + ".example.com"
	case 3:
		return label(r) + ".example.org"
	case 4:
		return label(r) + "." + label(r) + "." + pick(r, []string{"com", "net", "io", "svc", "pod", "dns", "local"})
	default:
		return label(r) + "." + pick(r, []string{"web", "db", "com", nsA, nsB}) + "." + pick(r, []string{nsA, nsB, nsEmpty, "com"})
	}
}

// next draws a lookup.
func (g *generator) next(r *rand.Rand) lookup {
	l := lookup{ns: pick(r, []string{nsA, nsA, nsA, nsB, nsEmpty})}
	g.mu.Lock()
	dynamic, reverse := g.dynamic, g.reverse
	g.mu.Unlock()
	relative := func() string {
		switch n := r.IntN(10); {
		case n < 5:
			return pick(r, relNames)
		case n < 7 && len(dynamic) > 0:
			d := pick(r, dynamic)
			if r.IntN(2) == 0 {
				return d + "." + nsA
			}
			return d
		default:
			return randomName(r)
		}
	}
	switch n := r.IntN(20); {
	case n < 9: // getaddrinfo
		l.client = pick(r, []string{glibc, glibc, musl})
		l.name = relative()
		l.qtypes = []uint16{dns.TypeA, dns.TypeAAAA}
	case n < 13: // res_search
		l.client = pick(r, []string{glibc, glibc, musl})
		l.qtypes = []uint16{pick(r, searchTypes)}
		switch {
		case l.qtypes[0] == dns.TypeSRV || r.IntN(4) == 0:
			l.name = pick(r, srvNames)
		case l.qtypes[0] == dns.TypePTR && len(reverse) > 0:
			l.name = pick(r, reverse)
		default:
			l.name = relative()
		}
	default: // as it is
		l.client = direct
		l.qtypes = []uint16{pick(r, allTypes)}
		switch m := r.IntN(10); {
		case m < 5:
			l.name = pick(r, fqdns)
		case m < 6 && len(reverse) > 0:
			l.name = pick(r, reverse)
		case m < 7 && len(dynamic) > 0:
			l.name = pick(r, dynamic) + "." + nsA + ".svc." + g.domain + "."
		case m < 8:
			l.name = relative() + "." + pick(r, searchList(l.ns, g.domain)) + "."
		default:
			l.name = dns.Fqdn(relative())
		}
	}
	// Stub resolvers send no OPT record unless resolv.conf says edns0
	// (glibc: 1200 bytes); direct clients often do, with DO and CD.
	switch {
	case l.client == glibc && r.IntN(5) == 0:
		l.edns = 1200
	case l.client == direct && r.IntN(2) == 0:
		l.edns = pick(r, []uint16{512, 1232, 4096})
		l.do = r.IntN(2) == 0
	}
	if l.client == direct && r.IntN(8) == 0 {
		l.cd = true
	}
	if r.IntN(4) == 0 {
		l.name = mixCase(r, l.name)
	}
	return l
}

// reverseName is the PTR name of an address.
func reverseName(ip string) string {
	n, err := dns.ReverseAddr(ip)
	if err != nil {
		return ""
	}
	return strings.ToLower(n)
}
