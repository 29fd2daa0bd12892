package upstream

import (
	"github.com/prometheus/client_golang/prometheus"

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

type poolMetrics struct {
	requests  *prometheus.CounterVec   // upstream, result
	duration  *prometheus.HistogramVec // upstream
	coalesced prometheus.Counter
	healthy   *prometheus.GaugeVec // upstream, address
	connsOpen prometheus.Gauge
	fallback  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, addrs []*address) (*poolMetrics, error) {
	m := &poolMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "requests_total",
			Help: "Attempts to exchange a query with an upstream address, by upstream kind and result.",
		}, []string{"upstream", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "request_duration_seconds",
			Help: "Duration of one attempt on one upstream address, dial included.",
			// 50µs (pooled loopback) to ~4s (beyond the attempt timeout).
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 13),
		}, []string{"upstream"}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "coalesced_total",
			Help: "Queries that waited for an identical in-flight exchange instead of sending their own.",
		}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "healthy",
			Help: "1 when the upstream address is in use, 0 while it is marked down and backing off.",
		}, []string{"upstream", "address"}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "conns_open",
			Help: "Open TCP connections to upstream addresses, idle and busy.",
		}),
		fallback: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "upstream", Name: "fallback_total",
			Help: "Exchanges answered by a fallback address instead of the backend.",
		}),
	}
	for _, k := range []string{kindBackend, kindFallback} {
		for _, r := range []string{resultOK, resultError, resultTimeout, resultOverloaded} {
			m.requests.WithLabelValues(k, r)
		}
		m.duration.WithLabelValues(k)
	}
	for _, a := range addrs {
		m.healthy.WithLabelValues(a.kind, a.addr).Set(1)
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.coalesced, m.healthy, m.connsOpen, m.fallback} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
