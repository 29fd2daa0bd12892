package gate

import (
	"fmt"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"

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

// Series families.
const (
	familyReady    = metrics.Namespace + "_backend_ready"
	familyFailures = metrics.Namespace + "_backend_probe_failures_total"
)

type gateMetrics struct {
	set   *vm.Set
	ready *vm.Gauge
	// failures holds nodedns_backend_probe_failures_total by probe, then
	// reason: every label pair a probe can report, created up front.
	failures map[string]map[string]*vm.Counter
}

// failure counts a failed probe. reason is one of upstream.Reasons or
// reasonStatus.
func (m *gateMetrics) failure(probe, reason string) {
	c := m.failures[probe][reason]
	if c == nil {
		// A reason no probe is expected to report (ok, overloaded): still
		// counted, in a series created now. Probes run once a second.
		c = m.set.GetOrCreateCounter(metrics.Name(familyFailures, "probe", probe, "reason", reason))
	}
	c.Inc()
}

// newMetrics creates the gate's series in set. It fails if set already
// holds them (a second gate on the same set).
func newMetrics(set *vm.Set) (*gateMetrics, error) {
	for _, name := range set.ListMetricNames() {
		for _, f := range []string{familyReady, familyFailures} {
			if name == f || strings.HasPrefix(name, f+"{") {
				return nil, fmt.Errorf("series %s is already registered", name)
			}
		}
	}
	metrics.Help(familyReady, "1 when the local backend passes its readiness probes, 0 otherwise.")
	metrics.Help(familyFailures, "Failed readiness probes of the local backend, by probe (http, dns) and reason.")
	m := &gateMetrics{
		set:      set,
		ready:    set.NewGauge(familyReady, nil),
		failures: map[string]map[string]*vm.Counter{},
	}
	for _, p := range []string{probeHTTP, probeDNS} {
		m.failures[p] = map[string]*vm.Counter{}
		for _, r := range upstream.Reasons {
			// No probe of the gate is refused for load or judged by rcode.
			if r != upstream.ReasonOK && r != upstream.ReasonOverloaded && r != upstream.ReasonRcode {
				m.failures[p][r] = set.NewCounter(metrics.Name(familyFailures, "probe", p, "reason", r))
			}
		}
	}
	m.failures[probeHTTP][reasonStatus] = set.NewCounter(metrics.Name(familyFailures, "probe", probeHTTP, "reason", reasonStatus))
	return m, nil
}
