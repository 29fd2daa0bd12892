package gen

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// TestDrawNamesItsEntry: Draw returns the index of the entry whose
// pattern made the name, and drawing costs no allocation beyond the
// name's own.
func TestDrawNamesItsEntry(t *testing.T) {
	m, err := NewMix([]Entry{{"a{n:3}.x", 1}, {"b{n:3}.x", 2}, {"c.x", 1}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, m.Len())
	for range 4000 {
		name, i := m.Draw(r)
		if want := "abc"[i]; name[0] != want {
			t.Fatalf("Draw gave %q with entry %d (%s)", name, i, m.Pattern(i))
		}
		counts[i]++
	}
	if counts[1] < 1800 || counts[1] > 2200 {
		t.Errorf("entry of weight 2 drawn %d of 4000 times: %v", counts[1], counts)
	}
	fixed, _ := NewMix([]Entry{{"c.x", 1}, {"d.x", 1}})
	if a := testing.AllocsPerRun(1000, func() { fixed.Draw(r) }); a != 0 {
		t.Errorf("Draw of fixed names allocates %v times per call, want 0", a)
	}
}

// TestByPattern runs a mix from a file against a server that delays the
// answers for the names of one pattern by 20 ms and knows no name of
// another: each pattern's counts match the queries the server saw for
// it, its outcomes are its own, and its percentiles come from its own
// latencies only.
func TestByPattern(t *testing.T) {
	const delay = 20 * time.Millisecond
	names := map[string]bool{}
	for i := range 5 {
		names["fast"+strconv.Itoa(i)+".test."] = true
		names["slow"+strconv.Itoa(i)+".test."] = true
	}
	z := &zone{names: names, drop: func(q dns.Question, n int) bool {
		if strings.HasPrefix(q.Name, "slow") {
			time.Sleep(delay)
		}
		return false
	}}
	cfg := testConfig(dnstest.Start(t, z).Addr)
	cfg.Timeout = 2 * time.Second
	cfg.NoAAAA = true // one query per lookup: the server's count is the lookups'
	file := filepath.Join(t.TempDir(), "mix.txt")
	// Trailing dots: no search path, so each name is asked as written.
	if err := os.WriteFile(file, []byte("fast{n:5}.test. 3\nslow{n:5}.test.\n# none of these exist\ngone{n:5}.test. 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if cfg.Mix, err = ParseMix("file:" + file); err != nil {
		t.Fatal(err)
	}
	cfg.Rate, cfg.Duration, cfg.Pods = 300, time.Second, 4
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = res.WriteText(&text)
	t.Logf("\n%s", text.String())

	want := []string{"fast{n:5}.test.", "slow{n:5}.test.", "gone{n:5}.test."}
	if len(res.ByPattern) != len(want) {
		t.Fatalf("ByPattern has %d entries, want %d: %+v", len(res.ByPattern), len(want), res.ByPattern)
	}
	seen := map[string]uint64{}
	for _, q := range z.questions() {
		seen[q[:4]]++
	}
	var lookups, ok uint64
	for i, p := range res.ByPattern {
		if p.Pattern != want[i] {
			t.Errorf("entry %d is %q, want %q", i, p.Pattern, want[i])
		}
		if got := seen[p.Pattern[:4]]; p.Lookups != got || p.Answered()+p.Timeouts != p.Lookups {
			t.Errorf("%s: %d lookups (%d answered, %d timeouts), the server saw %d queries", p.Pattern, p.Lookups, p.Answered(), p.Timeouts, got)
		}
		if p.Lookups == 0 || p.Percentiles != Summarize(p.Hist()) || p.Hist().Count() != p.Answered() {
			t.Errorf("%s: %d lookups, percentiles %+v of %d values", p.Pattern, p.Lookups, p.Percentiles, p.Hist().Count())
		}
		lookups += p.Lookups
		ok += p.OK
	}
	if lookups != res.Lookups || ok != res.OK {
		t.Errorf("patterns add up to %d lookups, %d ok; the run has %d, %d", lookups, ok, res.Lookups, res.OK)
	}
	fast, slow, gone := res.ByPattern[0], res.ByPattern[1], res.ByPattern[2]
	if fast.OK != fast.Lookups || slow.OK != slow.Lookups || gone.NXDomain != gone.Lookups || gone.OK != 0 {
		for _, p := range res.ByPattern {
			t.Errorf("%s: %d lookups: ok %d, nxdomain %d, failed %d, timeouts %d", p.Pattern, p.Lookups, p.OK, p.NXDomain, p.Failed, p.Timeouts)
		}
	}
	if share := float64(fast.Lookups) / float64(res.Lookups); share < 0.45 || share > 0.75 {
		t.Errorf("fast has %.2f of the lookups, want about 0.6", share)
	}
	if slow.MinLatency < delay || slow.Percentiles.P50 < delay {
		t.Errorf("slow pattern: min %v, p50 %v; want both >= %v", slow.MinLatency, slow.Percentiles.P50, delay)
	}
	if fast.Percentiles.P50 >= delay || gone.Percentiles.P50 >= delay {
		t.Errorf("p50 fast %v, gone %v; want < %v (only the slow pattern is delayed)", fast.Percentiles.P50, gone.Percentiles.P50, delay)
	}
	for _, w := range want {
		if !strings.Contains(text.String(), "  "+w+" ") {
			t.Errorf("text output has no line for %s:\n%s", w, text.String())
		}
	}
}

// TestMergeByPattern merges two rounds read back from JSON: counts add
// up, histograms merge and percentiles are those of the merged values,
// entries line up by pattern (a pattern twice in a mix stays twice), and
// a result without patterns (an older file) adds none.
func TestMergeByPattern(t *testing.T) {
	round := func(lat map[string][]time.Duration, order ...string) *Result {
		r := &Result{Latency: new(Histogram)}
		for _, pat := range order {
			p := PatternResult{Pattern: pat, Latency: new(Histogram)}
			for _, d := range lat[pat] {
				p.Lookups++
				p.count(OK, d)
				r.Lookups++
				r.OK++
				r.Latency.Record(d)
			}
			p.Lookups++ // and one timeout each
			p.count(Timeout, 0)
			r.ByPattern = append(r.ByPattern, p)
		}
		r.fill()
		// Through JSON, as compare reads the generator's files.
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		return &back
	}
	ms := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	a := round(map[string][]time.Duration{"x": ms(10, time.Millisecond), "y": ms(4, 50*time.Millisecond)}, "x", "y", "x")
	b := round(map[string][]time.Duration{"x": ms(10, 3*time.Millisecond), "y": ms(2, 10*time.Millisecond)}, "x", "y", "x")
	old := &Result{Lookups: 1, OK: 1, Buckets: []Bucket{{bucketOf(time.Millisecond), 1}}, Percentiles: Percentiles{Max: time.Millisecond, Mean: time.Millisecond}, MinLatency: time.Millisecond}
	m := Merge(a, old, b)
	if len(m.ByPattern) != 3 {
		t.Fatalf("merged %d patterns, want 3 (x, y, x): %+v", len(m.ByPattern), m.ByPattern)
	}
	x, y := m.ByPattern[0], m.ByPattern[1]
	if x.Pattern != "x" || y.Pattern != "y" || m.ByPattern[2].Pattern != "x" {
		t.Errorf("patterns %q %q %q, want x y x", x.Pattern, y.Pattern, m.ByPattern[2].Pattern)
	}
	if x.Lookups != 22 || x.OK != 20 || x.Timeouts != 2 || y.Lookups != 8 || y.OK != 6 {
		t.Errorf("counts x %+v y %+v", x, y)
	}
	// x: ten at 1ms, ten at 3ms; y: four at 50ms, two at 10ms.
	if x.Percentiles.Max != 3*time.Millisecond || x.MinLatency != time.Millisecond || x.Percentiles.P50 > 1020*time.Microsecond || x.Percentiles.P90 < 3*time.Millisecond || x.Percentiles.Mean != 2*time.Millisecond {
		t.Errorf("x percentiles %+v, min %v", x.Percentiles, x.MinLatency)
	}
	if y.Percentiles.Max != 50*time.Millisecond || y.MinLatency != 10*time.Millisecond || y.Percentiles.P50 != 50*time.Millisecond || y.Hist().Count() != 6 {
		t.Errorf("y percentiles %+v, min %v, %d values", y.Percentiles, y.MinLatency, y.Hist().Count())
	}
	if m := Merge(old, old); m.ByPattern != nil {
		t.Errorf("merging results without patterns made %+v", m.ByPattern)
	}
}
