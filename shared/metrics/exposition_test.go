package metrics

import (
	"bufio"
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// exposition is what Handler writes for a set holding each kind of series
// the frontend makes: library counters, gauges and histograms, sharded
// counters of two families in one call, and two sharded histograms of one
// family (each writes its own metadata), then the go_* and process_*
// series.
func exposition(t *testing.T) []byte {
	t.Helper()
	Help("nodedns_expo_requests_total", "Requests, by kind.")
	Help("nodedns_expo_inflight", "Requests in flight.")
	Help("nodedns_expo_size_bytes", "Request sizes.")
	Help("nodedns_expo_packets_total", "Packets, by direction.")
	Help("nodedns_expo_drops_total", "Dropped packets.")
	Help("nodedns_expo_batch", "Datagrams per read.")
	s := NewSet()
	s.NewCounter(Name("nodedns_expo_requests_total", "kind", "a")).Inc()
	s.NewCounter(Name("nodedns_expo_requests_total", "kind", "b")).Add(2)
	s.NewGauge("nodedns_expo_inflight", nil).Set(1)
	s.NewPrometheusHistogramExt("nodedns_expo_size_bytes", []float64{64, 512}).Update(100)
	cs := NewShardedCounters(s, Name("nodedns_expo_packets_total", "direction", "in"),
		Name("nodedns_expo_packets_total", "direction", "out"), "nodedns_expo_drops_total")
	cs[0].Add(3)
	NewShardedHistogram(s, Name("nodedns_expo_batch", "proto", "udp"), []float64{1, 8}).Update(2)
	NewShardedHistogram(s, Name("nodedns_expo_batch", "proto", "tcp"), []float64{1, 8}).Update(1)
	var buf bytes.Buffer
	if code, _ := Handler(s)(&buf); code != 200 {
		t.Fatalf("status %d", code)
	}
	return buf.Bytes()
}

// TestExpositionPromtool lints Handler's output with Prometheus's own
// checker: it must parse, and have no finding (help on every family,
// _total on counters and only on them, base units, ...).
func TestExpositionPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package (tools/deps.sh does, as root)")
	}
	body := exposition(t)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		t.Errorf("promtool check metrics: %v:\n%s\n--- input:\n%s", err, out, body)
	default:
		t.Fatal(err)
	}
}

// TestExpositionMetadata checks the same without promtool: each family has
// one HELP with text and one TYPE, both before its first sample, counters
// (and only they) end in _total, and the go_* and process_* series that
// the chart's dashboard and docs use are there.
func TestExpositionMetadata(t *testing.T) {
	body := exposition(t)
	helpOf, typeOf := map[string]string{}, map[string]string{}
	sampled := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if kind, family, ok := metadata([]byte(line)); ok {
			m := map[string]map[string]string{"HELP": helpOf, "TYPE": typeOf}[kind]
			if _, dup := m[family]; dup {
				t.Errorf("second %s line for %s: %q", kind, family, line)
			}
			if sampled[family] {
				t.Errorf("%s of %s after its samples", kind, family)
			}
			_, v, _ := strings.Cut(strings.TrimPrefix(line, "# "+kind+" "), " ")
			m[family] = v
			if kind == "HELP" && strings.TrimSpace(v) == "" {
				t.Errorf("%s has no help text", family)
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name := familyOf(strings.Fields(line)[0])
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(name, suffix); ok && (typeOf[f] == "histogram" || typeOf[f] == "summary") {
				family = f
			}
		}
		if typeOf[family] == "" {
			t.Errorf("sample of %s without a TYPE before it: %q", family, line)
		}
		sampled[family] = true
	}
	for family, typ := range typeOf {
		if (typ == "counter") != strings.HasSuffix(family, "_total") {
			t.Errorf("%s is a %s", family, typ)
		}
	}
	for _, want := range []string{
		// helm/nodedns/dashboards/nodedns.json and docs/monitoring.md
		"process_resident_memory_bytes", "process_cpu_seconds_total",
		// docs/studies/2026-11-29-frontend-memory.md
		"go_memstats_heap_inuse_bytes", "go_memstats_next_gc_bytes", "go_gc_duration_seconds",
		// the Prometheus client's names, as the backend writes them
		"go_goroutines", "go_threads", "go_info", "go_gc_gomemlimit_bytes", "go_gc_gogc_percent",
		"process_open_fds", "process_max_fds", "process_start_time_seconds", "process_virtual_memory_bytes",
	} {
		if !sampled[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !sampled["nodedns_expo_batch"] || typeOf["nodedns_expo_batch"] != "histogram" {
		t.Errorf("sharded histogram family missing or mistyped: %q", typeOf["nodedns_expo_batch"])
	}
}
