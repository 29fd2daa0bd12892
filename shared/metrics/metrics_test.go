package metrics

import (
	"bytes"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		family string
		labels []string
		want   string
	}{
		{"a_total", nil, "a_total"},
		{"a_total", []string{"server", "dns://:53", "zone", "."}, `a_total{server="dns://:53",zone="."}`},
		{"a_total", []string{"v", "q\"b\\s\nn"}, `a_total{v="q\"b\\s\nn"}`},
	} {
		if got := Name(tc.family, tc.labels...); got != tc.want {
			t.Errorf("Name(%q, %q) = %s, want %s", tc.family, tc.labels, got, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Name with an odd label list did not panic")
		}
	}()
	Name("a", "b")
}

func TestHandlerAndValues(t *testing.T) {
	s := NewSet()
	Help("nodedns_test_requests_total", "Requests, by kind.\nSecond line.")
	c := s.NewCounter(Name("nodedns_test_requests_total", "kind", "udp"))
	c.Add(3)
	s.NewCounter(Name("nodedns_test_requests_total", "kind", "tcp")).Inc()
	g := s.NewGauge("nodedns_test_inflight", nil)
	g.Set(7)
	h := s.NewPrometheusHistogramExt(Name("nodedns_test_seconds", "server", "x"), []float64{0.001, 0.01})
	h.Update(0.005)
	h.Update(0.5)

	v := Values(s)
	for name, want := range map[string]float64{
		`nodedns_test_requests_total{kind="udp"}`:            3,
		`nodedns_test_requests_total{kind="tcp"}`:            1,
		`nodedns_test_inflight`:                              7,
		`nodedns_test_seconds_bucket{server="x",le="0.001"}`: 0,
		`nodedns_test_seconds_bucket{server="x",le="0.01"}`:  1,
		`nodedns_test_seconds_bucket{server="x",le="+Inf"}`:  2,
		`nodedns_test_seconds_count{server="x"}`:             2,
		`nodedns_test_seconds_sum{server="x"}`:               0.505,
	} {
		if got, ok := v[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	var buf bytes.Buffer
	code, ct := Handler(s)(&buf)
	body := buf.Bytes()
	text := string(body)
	if code != 200 {
		t.Errorf("status %d", code)
	}
	for _, want := range []string{
		"# HELP nodedns_test_requests_total Requests, by kind.\\nSecond line.\n",
		"# TYPE nodedns_test_requests_total counter\n",
		"# TYPE nodedns_test_inflight gauge\n",
		"# TYPE nodedns_test_seconds histogram\n",
		"\nprocess_resident_memory_bytes ",
		"\ngo_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	if _, err := parse(body); err != nil {
		t.Errorf("own output does not parse: %v", err)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, in := range []string{"novalue\n", "a{} x\n"} {
		if _, err := parse([]byte(in)); err == nil {
			t.Errorf("parse(%q) gave no error", in)
		}
	}
}
