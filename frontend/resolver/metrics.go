package resolver

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/frontend/cache"
	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
)

// Label values. The frontend serves the root zone and has no views; the
// Handler contract does not carry the client's address family, so family is
// always "1" (CoreDNS: 1 = IPv4, 2 = IPv6).
const (
	zone   = "."
	view   = ""
	family = "1"
)

// Values of the "plugin" label of coredns_dns_responses_total: who made the
// answer.
const (
	pluginLocal   = iota // "": made here (FORMERR, NOTIMP, SERVFAIL, BADVERS)
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
	requests    [2][]prometheus.Counter // [proto][typeIndex]; last index is "other"
	typeIndex   [256]uint8              // qtype → index, for qtypes below 256
	responses   [nPlugins][maxRcode + 2]prometheus.Counter
	duration    prometheus.Observer
	servedStale prometheus.Counter
	prefetch    prometheus.Counter
	malformed   map[*dnswire.ParseError]prometheus.Counter
	mismatch    prometheus.Counter
	upErrors    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, srv string, c *cache.Cache) *metrics {
	m := &metrics{malformed: make(map[*dnswire.ParseError]prometheus.Counter)}
	cn, nn := sharedmetrics.CoreDNSNamespace, sharedmetrics.Namespace

	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: cn, Subsystem: "dns", Name: "requests_total",
		Help: "Counter of DNS requests made per zone, protocol and family.",
	}, []string{"server", "zone", "view", "proto", "family", "type"})
	for p, proto := range []string{"udp", "tcp"} {
		for i, t := range monitoredTypes {
			m.requests[p] = append(m.requests[p], requests.WithLabelValues(srv, zone, view, proto, family, dns.TypeToString[t]))
			if t < 256 {
				m.typeIndex[t] = uint8(i)
			}
		}
		m.requests[p] = append(m.requests[p], requests.WithLabelValues(srv, zone, view, proto, family, "other"))
	}
	other := uint8(len(monitoredTypes))
	for t := range m.typeIndex {
		if m.typeIndex[t] == 0 && uint16(t) != monitoredTypes[0] {
			m.typeIndex[t] = other
		}
	}

	responses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: cn, Subsystem: "dns", Name: "responses_total",
		Help: "Counter of response status codes.",
	}, []string{"server", "zone", "view", "rcode", "plugin"})
	for p := range nPlugins {
		for rc := 0; rc <= maxRcode+1; rc++ {
			m.responses[p][rc] = responses.WithLabelValues(srv, zone, view, rcodeName(rc), pluginNames[p])
		}
	}

	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: cn, Subsystem: "dns", Name: "request_duration_seconds",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16), // CoreDNS's: 0.25ms to 8s
		Help:    "Histogram of the time (in seconds) each request took per zone.",
	}, []string{"server", "zone", "view"})
	m.duration = duration.WithLabelValues(srv, zone, view)

	servedStale := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: cn, Subsystem: "cache", Name: "served_stale_total",
		Help: "The number of requests served from stale cache entries.",
	}, []string{"server", "zones", "view"})
	m.servedStale = servedStale.WithLabelValues(srv, zone, view)
	prefetch := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: cn, Subsystem: "cache", Name: "prefetch_total",
		Help: "The number of times the cache has prefetched a cached item.",
	}, []string{"server", "zones", "view"})
	m.prefetch = prefetch.WithLabelValues(srv, zone, view)

	malformed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: nn, Name: "malformed_queries_total",
		Help: "Queries rejected by the parser, by reason (answered FORMERR, NOTIMP or BADVERS, or dropped).",
	}, []string{"reason"})
	for _, e := range dnswire.Reasons {
		m.malformed[e] = malformed.WithLabelValues(e.Reason)
	}
	m.mismatch = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: nn, Name: "upstream_mismatch_total",
		Help: "Backend answers whose question did not match the query; answered SERVFAIL (or stale) and not cached.",
	})
	m.upErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: nn, Name: "upstream_errors_total",
		Help: "Misses and prefetches left without an answer after the upstream pool's retries and fallbacks.",
	})

	reg.MustRegister(requests, responses, duration, servedStale, prefetch, malformed,
		m.mismatch, m.upErrors, newCacheCollector(c, srv))
	return m
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
	p := 0
	if proto == server.TCP {
		p = 1
	}
	m.requests[p][i].Inc()
}

// response counts an answer made after start, and observes its duration
// weight times (0 for an answer that was not timed).
func (m *metrics) response(plugin, rcode int, start time.Time, weight int) {
	if rcode < 0 || rcode > maxRcode {
		rcode = maxRcode + 1
	}
	m.responses[plugin][rcode].Inc()
	if weight > 0 {
		d := time.Since(start).Seconds()
		for range weight {
			m.duration.Observe(d)
		}
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

// cacheCollector reports the cache's own counters, which the cache keeps
// per shard under the shard lock so that hits share no cache line.
type cacheCollector struct {
	c                                      *cache.Cache
	srv                                    string
	entries, hits, misses, reqs, evictions *prometheus.Desc
}

func newCacheCollector(c *cache.Cache, srv string) *cacheCollector {
	name := func(n string) string {
		return prometheus.BuildFQName(sharedmetrics.CoreDNSNamespace, "cache", n)
	}
	typed := []string{"server", "type", "zones", "view"}
	plain := []string{"server", "zones", "view"}
	return &cacheCollector{
		c: c, srv: srv,
		entries:   prometheus.NewDesc(name("entries"), "The number of elements in the cache.", typed, nil),
		hits:      prometheus.NewDesc(name("hits_total"), "The count of cache hits.", typed, nil),
		misses:    prometheus.NewDesc(name("misses_total"), "The count of cache misses.", plain, nil),
		reqs:      prometheus.NewDesc(name("requests_total"), "The count of cache requests.", plain, nil),
		evictions: prometheus.NewDesc(name("evictions_total"), "The count of cache evictions.", typed, nil),
	}
}

func (cc *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cc.entries
	ch <- cc.hits
	ch <- cc.misses
	ch <- cc.reqs
	ch <- cc.evictions
}

func (cc *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Stats()
	for k, typ := range []string{"success", "denial"} {
		ch <- prometheus.MustNewConstMetric(cc.entries, prometheus.GaugeValue, float64(st.Entries[k]), cc.srv, typ, zone, view)
		ch <- prometheus.MustNewConstMetric(cc.hits, prometheus.CounterValue, float64(st.Hits[k]), cc.srv, typ, zone, view)
		ch <- prometheus.MustNewConstMetric(cc.evictions, prometheus.CounterValue, float64(st.Evictions[k]), cc.srv, typ, zone, view)
	}
	ch <- prometheus.MustNewConstMetric(cc.misses, prometheus.CounterValue, float64(st.Misses), cc.srv, zone, view)
	ch <- prometheus.MustNewConstMetric(cc.reqs, prometheus.CounterValue, float64(st.Misses+st.Hits[0]+st.Hits[1]), cc.srv, zone, view)
}
