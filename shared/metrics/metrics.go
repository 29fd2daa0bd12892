// Package metrics holds what the nodedns processes share for Prometheus:
// the namespaces, a registry constructor and the HTTP handler.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	// Namespace prefixes every series that is new in nodedns.
	Namespace = "nodedns"
	// CoreDNSNamespace prefixes series whose meaning matches CoreDNS's own,
	// so that existing CoreDNS dashboards keep working.
	CoreDNSNamespace = "coredns"
)

// NewRegistry returns a registry with the Go runtime and process collectors.
// Each process (and each test) owns its registry; nothing uses the global one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves reg in the Prometheus text format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
