package nodenet

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/shared/metrics"
)

// Setup operations, the values of the op label.
const (
	opDetect   = "detect"   // choosing the iptables backend
	opLink     = "link"     // creating, finding or deleting the interface
	opAddr     = "addr"     // adding or removing addresses
	opRules    = "rules"    // ensuring or deleting iptables rules
	opTeardown = "teardown" // anything failing during Teardown
)

type managerMetrics struct {
	setupErrors *prometheus.CounterVec
	installed   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *managerMetrics {
	m := &managerMetrics{
		setupErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace,
			Name:      "setup_errors_total",
			Help:      "Errors while setting up or removing the node's DNS interface and rules, by operation.",
		}, []string{"op"}),
		installed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace,
			Name:      "network_installed",
			Help:      "1 when the last sync left the interface and every rule in place.",
		}),
	}
	for _, op := range []string{opDetect, opLink, opAddr, opRules, opTeardown} {
		m.setupErrors.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.setupErrors, m.installed)
	}
	return m
}
