// Package monitoring checks nodedns's observability with the real tools:
// promtool lints both binaries' /metrics after real traffic, and a real
// Prometheus server scrapes a testbed node's frontend and backend with the
// scrape configuration the chart's ServiceMonitor describes and answers
// every query of the chart's Grafana dashboard (docs/monitoring.md). The
// package holds tests only; the chart's alert rules are tested with
// promtool in helm/prometheusrule_test.go.
package monitoring
