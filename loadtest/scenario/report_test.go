package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// TestWriteFilesMakesDir: `compare -from results.json -out DIR` writes into
// a DIR that does not exist yet, and what it writes reads back.
func TestWriteFilesMakesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	rep := &Report{Command: "nodedns-loadtest compare", Machine: "test"}
	path, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatalf("WriteFiles into a missing directory: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("report: %v", err)
	}
	back, err := ReadReport(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Command != rep.Command || back.Machine != rep.Machine {
		t.Errorf("read back %+v, want command %q machine %q", back, rep.Command, rep.Machine)
	}
}

// TestReportPatterns renders the section "Latency by name pattern" from
// a small synthetic report, after "The tail", one row per pattern and one
// column per design measured; a report whose results hold no patterns
// (written before the generator kept them) has no such section.
func TestReportPatterns(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	load := func(p99svc, p99rand time.Duration, timeouts uint64) *gen.Result {
		return &gen.Result{Lookups: 200, ByPattern: []gen.PatternResult{
			{Pattern: "svc-{n:20}", Lookups: 150, OK: 150, Percentiles: gen.Percentiles{P50: ms(0.5), P99: p99svc, Max: ms(3)}},
			{Pattern: "{rand}.flood.example.net", Lookups: 50, NXDomain: 50 - timeouts, Timeouts: timeouts, Percentiles: gen.Percentiles{P50: ms(1.2), P99: p99rand, Max: ms(40)}},
		}}
	}
	rep := &Report{Rows: []Row{
		{Design: "coredns", Load: load(ms(2.16), ms(30), 0)},
		{Design: "broken", Error: "did not start"},
		{Design: "nodedns", Load: load(ms(0.9), ms(12.5), 2)},
	}}
	var b strings.Builder
	rep.WriteMarkdown(&b)
	md := b.String()
	tail, sec := strings.Index(md, "## The tail"), strings.Index(md, "## Latency by name pattern")
	if sec < 0 || sec < tail {
		t.Fatalf("section at %d, The tail at %d:\n%s", sec, tail, md)
	}
	for _, want := range []string{
		"| pattern | coredns | nodedns |\n|---|--:|--:|\n",
		"| `svc-{n:20}` | 75.0% p50 500µs p99 2.16ms max 3.00ms | 75.0% p50 500µs p99 900µs max 3.00ms |\n",
		"| `{rand}.flood.example.net` | 25.0% p50 1.20ms p99 30.00ms max 40.00ms | 25.0% p50 1.20ms p99 12.50ms max 40.00ms t/o 2 |\n",
	} {
		if !strings.Contains(md[sec:], want) {
			t.Errorf("section lacks %q:\n%s", want, md[sec:])
		}
	}

	for i := range rep.Rows {
		if rep.Rows[i].Load != nil {
			rep.Rows[i].Load.ByPattern = nil
		}
	}
	b.Reset()
	rep.WriteMarkdown(&b)
	if strings.Contains(b.String(), "by name pattern") {
		t.Errorf("results without patterns still got the section:\n%s", b.String())
	}
}
