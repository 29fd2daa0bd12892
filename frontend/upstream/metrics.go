package upstream

import (
	"fmt"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/nodedns/nodedns/shared/metrics"
)

// Values of the upstream label.
const (
	kindBackend  = "backend"
	kindFallback = "fallback"
)

// Values of the result label of nodedns_upstream_requests_total.
const (
	resultOK         = "ok"
	resultError      = "error"
	resultTimeout    = "timeout"
	resultOverloaded = "overloaded"
)

// Series families.
const (
	familyRequests  = metrics.Namespace + "_upstream_requests_total"
	familyDuration  = metrics.Namespace + "_upstream_request_duration_seconds"
	familyCoalesced = metrics.Namespace + "_upstream_coalesced_total"
	familyHealthy   = metrics.Namespace + "_upstream_healthy"
	familyConnsOpen = metrics.Namespace + "_upstream_conns_open"
	familyFallback  = metrics.Namespace + "_upstream_fallback_total"
	familyStray     = metrics.Namespace + "_upstream_stray_messages_total"
	familyProbes    = metrics.Namespace + "_upstream_probes_total"
)

// probeResults are the values of the result label of
// nodedns_upstream_probes_total: ok, or why the probe failed. Overloaded
// and canceled are no probe's result (a probe is not bounded by
// MaxInflight, and one cut short by Close is not counted).
var probeResults = []string{ReasonOK, ReasonRefused, ReasonTimeout, ReasonReset, ReasonEOF,
	ReasonMismatch, ReasonRcode, ReasonOther}

type poolMetrics struct {
	kinds     map[string]*kindMetrics // by upstream label value; read-only after newMetrics
	coalesced *vm.Counter
	connsOpen *vm.Gauge
	fallback  *vm.Counter
}

// kindMetrics are the series of one value of the upstream label.
type kindMetrics struct {
	// nodedns_upstream_requests_total by result
	ok, err, timeout, overloaded *vm.Counter
	// nodedns_upstream_request_duration_seconds
	duration *vm.PrometheusHistogram
	// nodedns_upstream_stray_messages_total
	stray *vm.Counter
	// nodedns_upstream_probes_total by result, one of probeResults
	probes map[string]*vm.Counter
}

// probed counts a probe that ended with err.
func (km *kindMetrics) probed(err error) {
	c, ok := km.probes[Reason(err)]
	if !ok {
		c = km.probes[ReasonOther]
	}
	c.Inc()
}

// newMetrics creates the pool's series in set, and one
// nodedns_upstream_healthy series per address, set to 1. It fails if set
// already holds any of them (a second pool on the same set).
func newMetrics(set *vm.Set, addrs []*address) (*poolMetrics, error) {
	families := []string{familyRequests, familyDuration, familyCoalesced, familyHealthy, familyConnsOpen, familyFallback, familyStray, familyProbes}
	for _, name := range set.ListMetricNames() {
		for _, f := range families {
			if name == f || strings.HasPrefix(name, f+"{") {
				return nil, fmt.Errorf("series %s is already registered", name)
			}
		}
	}

	metrics.Help(familyRequests, "Attempts to exchange a query with an upstream address, by upstream kind and result.")
	metrics.Help(familyDuration, "Duration of one attempt on one upstream address, dial included.")
	metrics.Help(familyCoalesced, "Queries that waited for an identical in-flight exchange instead of sending their own.")
	metrics.Help(familyHealthy, "1 when the upstream address is in use, 0 while its probes have marked it down.")
	metrics.Help(familyConnsOpen, "Open TCP connections to upstream addresses, idle and busy.")
	metrics.Help(familyFallback, "Exchanges answered by a fallback address instead of the backend.")
	metrics.Help(familyProbes, "Health probes of upstream addresses, by upstream kind and result (ok, or why the probe failed).")
	metrics.Help(familyStray, "Messages on an upstream connection that answered no query in flight (ID or question mismatch, or bytes after an answer); each drops its connection, and a query that read one is retried once on a new connection.")

	// 50µs (pooled loopback) to ~4s (beyond the attempt timeout).
	buckets := vm.ExponentialBuckets(0.00005, 2.5, 13)
	m := &poolMetrics{
		coalesced: set.NewCounter(familyCoalesced),
		connsOpen: set.NewGauge(familyConnsOpen, nil),
		fallback:  set.NewCounter(familyFallback),
		kinds:     map[string]*kindMetrics{},
	}
	for _, k := range []string{kindBackend, kindFallback} {
		km := &kindMetrics{}
		m.kinds[k] = km
		km.ok = set.NewCounter(metrics.Name(familyRequests, "upstream", k, "result", resultOK))
		km.err = set.NewCounter(metrics.Name(familyRequests, "upstream", k, "result", resultError))
		km.timeout = set.NewCounter(metrics.Name(familyRequests, "upstream", k, "result", resultTimeout))
		km.overloaded = set.NewCounter(metrics.Name(familyRequests, "upstream", k, "result", resultOverloaded))
		km.duration = set.NewPrometheusHistogramExt(metrics.Name(familyDuration, "upstream", k), buckets)
		km.probes = map[string]*vm.Counter{}
		for _, r := range probeResults {
			km.probes[r] = set.NewCounter(metrics.Name(familyProbes, "upstream", k, "result", r))
		}
		km.stray = set.NewCounter(metrics.Name(familyStray, "upstream", k))
	}
	for _, a := range addrs {
		a.km = m.kinds[a.kind]
	}
	for _, a := range addrs {
		// Config.Validate rejects an address listed twice, so each
		// (upstream, address) pair is new here.
		a.healthy = set.NewGauge(metrics.Name(familyHealthy, "upstream", a.kind, "address", a.addr), nil)
		a.healthy.Set(1)
	}
	return m, nil
}
