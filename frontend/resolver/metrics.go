package resolver

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/cache"
	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
)

// Label values. The frontend serves the root zone and has no views.
const (
	zone = "."
	view = ""
)

// Values of the "plugin" label of coredns_dns_responses_total: who made the
// answer.
const (
	pluginLocal   = iota // "": made here (FORMERR, NOTIMP, SERVFAIL, BADVERS, REFUSED)
	pluginCache          // "cache": from the cache, fresh or stale
	pluginForward        // "forward": from the backend, on a miss
	nPlugins
)

var pluginNames = [nPlugins]string{"", "cache", "forward"}

// monitoredTypes are the qtypes CoreDNS gives their own "type" label value
// (plugin/metrics/vars/monitor.go); others count as "other".
var monitoredTypes = []uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeDNSKEY, dns.TypeDS, dns.TypeMX,
	dns.TypeNSEC3, dns.TypeNSEC, dns.TypeNS, dns.TypePTR, dns.TypeRRSIG, dns.TypeSOA,
	dns.TypeSRV, dns.TypeTXT, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeIXFR, dns.TypeAXFR, dns.TypeANY,
}

const maxRcode = 23 // BADCOOKIE, the largest rcode with a name (RFC 7873)

// metrics holds every series' children, resolved once so that the hot path
// only increments.
type metrics struct {
	// The hit path's series are kept per P and summed at scrape time
	// (sharedmetrics.NewShardedCounters): readers on different cores write
	// no common cache line and take no lock.
	requests    [4][]sharedmetrics.ShardedCounter // [server.Proto][typeIndex]; last index is "other"
	typeIndex   [256]uint8                        // qtype → index, for qtypes below 256
	responses   [nPlugins][maxRcode + 2]sharedmetrics.ShardedCounter
	duration    *sharedmetrics.ShardedHistogram
	servedStale sharedmetrics.ShardedCounter
	prefetch    *vm.Counter
	// searchPrefetch counts the exchanges started by search-path prefetch.
	searchPrefetch *vm.Counter
	// deniedBelow counts the queries denied from an NXDOMAIN above them.
	deniedBelow sharedmetrics.ShardedCounter
	malformed   map[*dnswire.ParseError]*vm.Counter
	mismatch    *vm.Counter
	upErrors    *vm.Counter
}

// Families of the resolver's series.
const (
	requestsFamily       = sharedmetrics.CoreDNSNamespace + "_dns_requests_total"
	responsesFamily      = sharedmetrics.CoreDNSNamespace + "_dns_responses_total"
	durationFamily       = sharedmetrics.CoreDNSNamespace + "_dns_request_duration_seconds"
	servedStaleFamily    = sharedmetrics.CoreDNSNamespace + "_cache_served_stale_total"
	prefetchFamily       = sharedmetrics.CoreDNSNamespace + "_cache_prefetch_total"
	searchPrefetchFamily = sharedmetrics.Namespace + "_search_prefetch_total"
	deniedBelowFamily    = sharedmetrics.Namespace + "_denied_below_nxdomain_total"
	malformedFamily      = sharedmetrics.Namespace + "_malformed_queries_total"
	mismatchFamily       = sharedmetrics.Namespace + "_upstream_mismatch_total"
	upErrorsFamily       = sharedmetrics.Namespace + "_upstream_errors_total"

	cacheEntriesFamily   = sharedmetrics.CoreDNSNamespace + "_cache_entries"
	cacheHitsFamily      = sharedmetrics.CoreDNSNamespace + "_cache_hits_total"
	cacheMissesFamily    = sharedmetrics.CoreDNSNamespace + "_cache_misses_total"
	cacheRequestsFamily  = sharedmetrics.CoreDNSNamespace + "_cache_requests_total"
	cacheEvictionsFamily = sharedmetrics.CoreDNSNamespace + "_cache_evictions_total"
)

func newMetrics(set *vm.Set, srv string, c *cache.Cache) *metrics {
	m := &metrics{malformed: make(map[*dnswire.ParseError]*vm.Counter)}
	name := sharedmetrics.Name

	sharedmetrics.Help(requestsFamily, "Counter of DNS requests made per zone, protocol and family.")
	// One call per family: its series are written together, in the order
	// the Prometheus client and VictoriaMetrics/metrics write them (sorted).
	var reqNames []string
	var reqAt [4][]int
	for p := range server.Proto(len(m.requests)) {
		proto, family := "udp", "1" // CoreDNS: family 1 is IPv4, 2 is IPv6
		if p.IsTCP() {
			proto = "tcp"
		}
		if p.IsIPv6() {
			family = "2"
		}
		request := func(typ string) {
			reqAt[p] = append(reqAt[p], len(reqNames))
			reqNames = append(reqNames, name(requestsFamily,
				"server", srv, "zone", zone, "view", view, "proto", proto, "family", family, "type", typ))
		}
		for i, t := range monitoredTypes {
			request(dns.TypeToString[t])
			if t < 256 {
				m.typeIndex[t] = uint8(i)
			}
		}
		request("other")
	}
	reqs := sharedmetrics.NewShardedCounters(set, sortedNames(reqNames)...)
	for p := range reqAt {
		for _, i := range reqAt[p] {
			m.requests[p] = append(m.requests[p], reqs[sortedIndex(reqNames, i)])
		}
	}
	other := uint8(len(monitoredTypes))
	for t := range m.typeIndex {
		if m.typeIndex[t] == 0 && uint16(t) != monitoredTypes[0] {
			m.typeIndex[t] = other
		}
	}

	sharedmetrics.Help(responsesFamily, "Counter of response status codes.")
	var respNames []string
	for p := range nPlugins {
		for rc := 0; rc <= maxRcode+1; rc++ {
			respNames = append(respNames, name(responsesFamily,
				"server", srv, "zone", zone, "view", view, "rcode", rcodeName(rc), "plugin", pluginNames[p]))
		}
	}
	resps := sharedmetrics.NewShardedCounters(set, sortedNames(respNames)...)
	for p := range nPlugins {
		for rc := 0; rc <= maxRcode+1; rc++ {
			m.responses[p][rc] = resps[sortedIndex(respNames, p*(maxRcode+2)+rc)]
		}
	}

	sharedmetrics.Help(durationFamily, "Histogram of the time (in seconds) each request took per zone.")
	m.duration = sharedmetrics.NewShardedHistogram(set, name(durationFamily, "server", srv, "zone", zone, "view", view),
		vm.ExponentialBuckets(0.00025, 2, 16)) // CoreDNS's: 0.25ms to 8s

	sharedmetrics.Help(servedStaleFamily, "The number of requests served from stale cache entries.")
	m.servedStale = sharedmetrics.NewShardedCounters(set, name(servedStaleFamily, "server", srv, "zones", zone, "view", view))[0]
	sharedmetrics.Help(prefetchFamily, "The number of times the cache has prefetched a cached item.")
	m.prefetch = set.NewCounter(name(prefetchFamily, "server", srv, "zones", zone, "view", view))
	sharedmetrics.Help(searchPrefetchFamily, "Exchanges a miss in a pod's first search domain started for the pod's next tries and the names above them (search-path prefetch).")
	m.searchPrefetch = set.NewCounter(searchPrefetchFamily)
	sharedmetrics.Help(deniedBelowFamily, "Queries answered NXDOMAIN from the cached NXDOMAIN of a Service, namespace or cluster-domain name above theirs, without asking the backend (RFC 8020).")
	m.deniedBelow = sharedmetrics.NewShardedCounters(set, deniedBelowFamily)[0]

	sharedmetrics.Help(malformedFamily, "Queries rejected by the parser, by reason (answered FORMERR, NOTIMP or BADVERS, or dropped).")
	for _, e := range dnswire.Reasons {
		m.malformed[e] = set.NewCounter(name(malformedFamily, "reason", e.Reason))
	}
	sharedmetrics.Help(mismatchFamily, "Backend answers whose question did not match the query; answered SERVFAIL (or stale) and not cached.")
	m.mismatch = set.NewCounter(mismatchFamily)
	sharedmetrics.Help(upErrorsFamily, "Misses and prefetches left without an answer after the upstream pool's retries and fallbacks.")
	m.upErrors = set.NewCounter(upErrorsFamily)

	newCacheWriter(c, srv).register(set)
	return m
}

// sortedNames returns names sorted, as a VictoriaMetrics set orders its
// series (by name within a family).
func sortedNames(names []string) []string {
	return slices.Sorted(slices.Values(names))
}

// sortedIndex is the position of names[i] in sortedNames(names).
func sortedIndex(names []string, i int) int {
	n := 0
	for _, s := range names {
		if s < names[i] {
			n++
		}
	}
	return n
}

func rcodeName(rc int) string {
	if rc > maxRcode {
		return "other"
	}
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}

func (m *metrics) request(proto server.Proto, qtype uint16) {
	i := uint8(len(monitoredTypes))
	if qtype < 256 { // every monitored type is
		i = m.typeIndex[qtype]
	}
	m.requests[proto&(server.TCP|server.IPv6)][i].Inc()
}

// response counts an answer made after start, and observes its duration
// weight times (0 for an answer that was not timed).
func (m *metrics) response(plugin, rcode int, start time.Time, weight int) {
	if rcode < 0 || rcode > maxRcode {
		rcode = maxRcode + 1
	}
	m.responses[plugin][rcode].Inc()
	if weight > 0 {
		m.duration.UpdateN(time.Since(start).Seconds(), weight)
	}
}

// hitSample: ServeFast times one query in hitSample and records that
// duration hitSample times, so that the histogram's count and shape stay
// those of all queries. Reading the clock twice would cost more than the
// rest of a hit (about 100ns per read on the test machine).
const hitSample = 16

// sampleStart returns the start of a timed ServeFast, and its weight; the
// zero time and 0 when this query is not timed.
func sampleStart() (time.Time, int) {
	if rand.Uint32()%hitSample != 0 {
		return time.Time{}, 0
	}
	return time.Now(), hitSample
}

// cacheWriter reports the cache's own counters, which the cache keeps per
// shard under the shard lock so that hits share no cache line. They are
// read once per scrape, so that the series of one scrape agree.
type cacheWriter struct {
	c *cache.Cache
	// Series names, built once: [kind] for the typed ones.
	entries, hits, evictions [2]string
	misses, requests         string
}

func newCacheWriter(c *cache.Cache, srv string) *cacheWriter {
	cw := &cacheWriter{c: c}
	for k, typ := range []string{"success", "denial"} {
		typed := func(family string) string {
			return sharedmetrics.Name(family, "server", srv, "type", typ, "zones", zone, "view", view)
		}
		cw.entries[k] = typed(cacheEntriesFamily)
		cw.hits[k] = typed(cacheHitsFamily)
		cw.evictions[k] = typed(cacheEvictionsFamily)
	}
	cw.misses = sharedmetrics.Name(cacheMissesFamily, "server", srv, "zones", zone, "view", view)
	cw.requests = sharedmetrics.Name(cacheRequestsFamily, "server", srv, "zones", zone, "view", view)
	return cw
}

func (cw *cacheWriter) register(set *vm.Set) {
	sharedmetrics.Help(cacheEntriesFamily, "The number of elements in the cache.")
	sharedmetrics.Help(cacheHitsFamily, "The count of cache hits.")
	sharedmetrics.Help(cacheMissesFamily, "The count of cache misses.")
	sharedmetrics.Help(cacheRequestsFamily, "The count of cache requests.")
	sharedmetrics.Help(cacheEvictionsFamily, "The count of cache evictions.")
	set.RegisterMetricsWriter(cw.write)
}

// write writes each family's metadata once, then its series.
func (cw *cacheWriter) write(w io.Writer) {
	st := cw.c.Stats()
	vm.WriteMetadataIfNeeded(w, cacheEntriesFamily, "gauge")
	for k := range 2 {
		fmt.Fprintf(w, "%s %d\n", cw.entries[k], st.Entries[k])
	}
	vm.WriteMetadataIfNeeded(w, cacheHitsFamily, "counter")
	for k := range 2 {
		fmt.Fprintf(w, "%s %d\n", cw.hits[k], st.Hits[k])
	}
	vm.WriteMetadataIfNeeded(w, cacheEvictionsFamily, "counter")
	for k := range 2 {
		fmt.Fprintf(w, "%s %d\n", cw.evictions[k], st.Evictions[k])
	}
	vm.WriteMetadataIfNeeded(w, cacheMissesFamily, "counter")
	fmt.Fprintf(w, "%s %d\n", cw.misses, st.Misses)
	vm.WriteMetadataIfNeeded(w, cacheRequestsFamily, "counter")
	fmt.Fprintf(w, "%s %d\n", cw.requests, st.Misses+st.Hits[0]+st.Hits[1])
}
