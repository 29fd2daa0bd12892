package upstream

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value returns the value of the single counter or gauge c collects.
func value(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	close(ch)
	m, ok := <-ch
	if !ok {
		t.Fatal("collector has no metric")
	}
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	switch {
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither a counter nor a gauge", m.Desc())
	return 0
}

func TestMetricsRegistered(t *testing.T) {
	p, reg := newPool(t, Config{Backend: "127.0.0.1:5300", Fallbacks: []string{"10.96.0.11:5301"}})
	_ = p
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{
		"nodedns_upstream_requests_total",
		"nodedns_upstream_request_duration_seconds",
		"nodedns_upstream_coalesced_total",
		"nodedns_upstream_healthy",
		"nodedns_upstream_conns_open",
		"nodedns_upstream_fallback_total",
	} {
		if !got[name] {
			t.Errorf("%s not exported", name)
		}
	}
}
