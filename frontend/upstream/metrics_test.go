package upstream

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestMetricsRegistered(t *testing.T) {
	_, set := newPool(t, Config{Backend: "127.0.0.1:5300", Fallbacks: []string{"10.96.0.11:5301"}})
	want := map[string]float64{
		"nodedns_upstream_coalesced_total": 0,
		"nodedns_upstream_conns_open":      0,
		"nodedns_upstream_fallback_total":  0,
		metrics.Name("nodedns_upstream_healthy", "upstream", "backend", "address", "127.0.0.1:5300"):   1,
		metrics.Name("nodedns_upstream_healthy", "upstream", "fallback", "address", "10.96.0.11:5301"): 1,
	}
	for _, k := range []string{"backend", "fallback"} {
		for _, r := range []string{"ok", "error", "timeout", "overloaded"} {
			want[metrics.Name("nodedns_upstream_requests_total", "upstream", k, "result", r)] = 0
		}
		want[metrics.Name("nodedns_upstream_request_duration_seconds_count", "upstream", k)] = 0
		for _, r := range []string{"ok", "refused", "timeout", "reset", "eof", "mismatch", "rcode", "other"} {
			want[metrics.Name("nodedns_upstream_probes_total", "upstream", k, "result", r)] = 0
		}
	}
	got := metrics.Values(set)
	for name, v := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		} else if g != v {
			t.Errorf("%s = %v, want %v", name, g, v)
		}
	}
	var healthy int
	for name := range got {
		if strings.HasPrefix(name, "nodedns_upstream_healthy{") {
			healthy++
		}
	}
	if healthy != 2 {
		t.Errorf("%d nodedns_upstream_healthy series, want one per address (2)", healthy)
	}
}

func TestMetricsDurationObserved(t *testing.T) {
	p, set := newPool(t, Config{Backend: deadAddr(t), FailThreshold: 5})
	_, _ = p.Exchange(t.Context(), dnstest.Query("x.example.", dns.TypeA))
	if n := metricstest.Value(t, set, "nodedns_upstream_request_duration_seconds_count", "upstream", "backend"); n != 1 {
		t.Errorf("request_duration_seconds_count{backend} = %v, want 1", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "error"); n != 1 {
		t.Errorf("requests_total{backend,error} = %v, want 1", n)
	}
}

// TestMetricsTwice checks that a second pool on the same set fails at New
// instead of sharing (or panicking on) the first pool's series.
func TestMetricsTwice(t *testing.T) {
	_, set := newPool(t, Config{Backend: "127.0.0.1:5300"})
	p, err := New(Config{Backend: "127.0.0.1:5301"}, zap.NewNop(), set)
	if err == nil {
		_ = p.Close()
		t.Fatal("New on a set that holds another pool's series: no error")
	}
}
