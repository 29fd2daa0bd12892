package gate

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/metrics"
)

// Values of the probe label.
const (
	probeHTTP = "http"
	probeDNS  = "dns"
)

// reasonStatus is the failure reason of an HTTP probe answered with a
// status other than 200; other reasons come from upstream.Reason.
const reasonStatus = "status"

type gateMetrics struct {
	ready    prometheus.Gauge
	failures *prometheus.CounterVec // probe, reason
}

func newMetrics(reg prometheus.Registerer) (*gateMetrics, error) {
	m := &gateMetrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "backend_ready",
			Help: "1 when the local backend passes its readiness probes, 0 otherwise.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "backend_probe_failures_total",
			Help: "Failed readiness probes of the local backend, by probe (http, dns) and reason.",
		}, []string{"probe", "reason"}),
	}
	for _, p := range []string{probeHTTP, probeDNS} {
		for _, r := range upstream.Reasons {
			if r != upstream.ReasonOK && r != upstream.ReasonOverloaded {
				m.failures.WithLabelValues(p, r)
			}
		}
	}
	m.failures.WithLabelValues(probeHTTP, reasonStatus)
	for _, c := range []prometheus.Collector{m.ready, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
