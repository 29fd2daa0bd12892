// Package metricstest reads series of a metrics set in tests.
package metricstest

import (
	"testing"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/nodedns/nodedns/shared/metrics"
)

// Value returns the current value of the series family{labels} (labels as
// key, value pairs, as metrics.Name takes them) in set. A series that set
// does not export fails the test: reading it as 0 would let a renamed or
// dropped series pass.
func Value(t testing.TB, set *vm.Set, family string, labels ...string) float64 {
	t.Helper()
	name := metrics.Name(family, labels...)
	v, ok := metrics.Values(set)[name]
	if !ok {
		t.Fatalf("series %s not exported", name)
	}
	return v
}
