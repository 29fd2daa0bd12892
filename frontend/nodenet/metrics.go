package nodenet

import (
	vm "github.com/VictoriaMetrics/metrics"

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

// Series families.
const (
	familySetupErrors = metrics.Namespace + "_setup_errors_total"
	familyInstalled   = metrics.Namespace + "_network_installed"
)

type managerMetrics struct {
	setupErrors map[string]*vm.Counter // by op; read-only after newMetrics
	installed   *vm.Gauge
}

// newMetrics creates the manager's series in set, or in a private set when
// set is nil. Like any series, they must not be in set already.
func newMetrics(set *vm.Set) *managerMetrics {
	if set == nil {
		set = metrics.NewSet()
	}
	metrics.Help(familySetupErrors, "Errors while setting up or removing the node's DNS interface and rules, by operation.")
	metrics.Help(familyInstalled, "1 when the last sync left the interface and every rule in place.")
	m := &managerMetrics{
		setupErrors: map[string]*vm.Counter{},
		installed:   set.NewGauge(familyInstalled, nil),
	}
	for _, op := range []string{opDetect, opLink, opAddr, opRules, opTeardown} {
		m.setupErrors[op] = set.NewCounter(metrics.Name(familySetupErrors, "op", op))
	}
	return m
}
