package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WriteFiles writes OUT/report.md and OUT/results.json and returns the
// report's path.
func (r *Report) WriteFiles(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	plots, plotErr := r.WritePlots(dir)
	r.Plots = plots
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return "", err
	}
	var md strings.Builder
	r.WriteMarkdown(&md)
	path := filepath.Join(dir, "report.md")
	return path, errors.Join(os.WriteFile(path, []byte(md.String()), 0o644), plotErr)
}

// ReadReport reads a results.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// WriteMarkdown writes the report.
func (r *Report) WriteMarkdown(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "# Per-node DNS designs side by side\n\n")
	if r.Command != "" {
		fmt.Fprintf(w, "Command: `%s`  \n", r.Command)
	}
	fmt.Fprintf(w, "Run: %s, %s.  \n", r.Started.Format(time.RFC3339), r.Machine)
	fmt.Fprintf(w, "Load: %d lookups/s open loop for %v per design in %d interleaved rounds (designs take turns), after a %v warm-up each, from %d pod addresses, mix `%s`, glibc stub behaviour (ndots:5, search path of namespace team-a, A+AAAA in parallel, timeout %v, attempts %d).\n\n",
		c.Rate, c.Duration, c.Rounds, c.Warmup, c.Pods, c.Mix, c.Timeout, c.Attempts)
	if c.GeneratorRealtime {
		fmt.Fprintf(w, "The generator ran under SCHED_RR (`-generator-realtime`): nothing else on the machine could make it begin a lookup late.\n\n")
	}
	r.WriteTable(w)
	fmt.Fprintf(w, "\nColumns: `lookups/s` answered lookups (getaddrinfo calls) per second, `q/lookup` DNS queries per lookup (search path expansion), latency of answered lookups from the time each was due, `fail` error answers, `t/o` lookups with every attempt unanswered, `ct new` conntrack entries created in the node's namespace, `node CPU s` and `node RSS` the node's DNS processes (CPU during the run, peak RSS over their life), `central CPU s` the DNS processes on the other node: the CoreDNS Deployment's replica, and for nodedns also that node's nodedns backend (the second endpoint of the fallback Service), `API-tier q` queries that reached a CoreDNS watching the API server (`coredns_dns_requests_total`), `upstream q` queries that reached the resolvers outside the cluster, `pkts out` packets the node sent toward other nodes.\n\n")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "- **%s**: %s", row.Design, row.Title)
		if row.Error != "" {
			fmt.Fprintf(w, " — **failed**: `%s`", oneLine(row.Error))
		}
		fmt.Fprintln(w)
	}
	if ratios := r.ratios(); ratios != "" {
		fmt.Fprintf(w, "\n%s", ratios)
	}
	r.writeTail(w)
	r.writePatterns(w)
	if r.Dnsperf != nil {
		fmt.Fprintf(w, "\n## Generator cross-check\n\n")
		r.Dnsperf.write(w)
	}
	if len(r.Chaos) > 0 {
		fmt.Fprintf(w, "\n## Chaos under load\n\n")
		fmt.Fprintf(w, "Each fault %v into a %v run at %d lookups/s, on a fresh node per design. `lost`: every attempt timed out; `failed`: error answer; `slow`: answered after more than %v.\n\n", chaosAt, r.Config.ChaosDuration, r.Config.Rate, slowAfter)
		writeChaos(w, r.Chaos)
		fmt.Fprintf(w, "\n## One row per design\n\n")
		r.WriteSummary(w)
	}
	if len(r.Plots) > 0 {
		fmt.Fprintf(w, "\n## Plots\n\n")
		for _, p := range r.Plots {
			fmt.Fprintf(w, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
}

// tailLookups is how many of each design's slowest lookups the report lists.
const tailLookups = 5

// writeTail lists what each design's slowest lookups were made of, and
// how long the node's DNS processes waited for a CPU: the evidence for
// where a tail comes from.
func (r *Report) writeTail(w io.Writer) {
	fmt.Fprintf(w, "\n## The tail\n\n")
	fmt.Fprintf(w, "Per design: how long the node's DNS processes waited, runnable, for a CPU during the measured runs (`/proc/PID/task/*/schedstat`), and its %d slowest lookups: when each was due, its latency, how late the generator began it, its queries, and its slowest exchange (A and AAAA of one search-path name). Many slow lookups due at one moment and begun late point at the generator or the whole machine; one slow exchange begun on time points at the server.\n\n", tailLookups)
	for _, row := range r.Rows {
		if row.Load == nil {
			continue
		}
		fmt.Fprintf(w, "- **%s**: run-queue wait %v over %.2f CPU s\n", row.Design, row.NodeRunqueueWait.Round(time.Millisecond), row.NodeCPU)
		for i, s := range row.Load.Slowest {
			if i == tailLookups {
				break
			}
			fmt.Fprintf(w, "  - %s %v, began %v late, %d queries (%d resent), slowest exchange %v: `%s`\n",
				s.Due.UTC().Format("15:04:05.000"), short(s.Latency), short(s.Late), s.Queries, s.Retries, short(s.SlowestExchange), s.SlowestName)
		}
	}
}

// writePatterns splits each design's lookups by the mix pattern that drew
// their names, to show which names make a tail. Results without patterns
// (results.json written before the generator kept them) leave it out.
func (r *Report) writePatterns(w io.Writer) {
	var rows []Row
	var patterns []string
	for _, row := range r.Rows {
		if row.Load == nil || len(row.Load.ByPattern) == 0 {
			continue
		}
		rows = append(rows, row)
		if len(row.Load.ByPattern) > len(patterns) {
			patterns = patterns[:0]
			for _, p := range row.Load.ByPattern {
				patterns = append(patterns, p.Pattern)
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Latency by name pattern\n\n")
	fmt.Fprintf(w, "Per pattern of the mix and design: the pattern's share of the design's lookups, then p50, p99 and max of its answered lookups (from the time each was due), and its error answers and timeouts where there were any.\n\n")
	fmt.Fprint(w, "| pattern |")
	for _, row := range rows {
		fmt.Fprintf(w, " %s |", row.Design)
	}
	fmt.Fprint(w, "\n|---|")
	for range rows {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	for i, pat := range patterns {
		fmt.Fprintf(w, "| `%s` |", pat)
		for _, row := range rows {
			l := row.Load
			if i >= len(l.ByPattern) || l.ByPattern[i].Pattern != pat {
				fmt.Fprint(w, " – |")
				continue
			}
			p := l.ByPattern[i]
			share := 0.0
			if l.Lookups > 0 {
				share = 100 * float64(p.Lookups) / float64(l.Lookups)
			}
			fmt.Fprintf(w, " %.1f%% p50 %s p99 %s max %s", share, short(p.Percentiles.P50), short(p.Percentiles.P99), short(p.Percentiles.Max))
			if p.Failed > 0 {
				fmt.Fprintf(w, " fail %d", p.Failed)
			}
			if p.Timeouts > 0 {
				fmt.Fprintf(w, " t/o %d", p.Timeouts)
			}
			fmt.Fprint(w, " |")
		}
		fmt.Fprintln(w)
	}
}

// WriteTable writes the comparison table (markdown).
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "| design | lookups/s | q/lookup | p50 | p90 | p99 | p99.9 | max | fail | t/o | ct new | node CPU s | node RSS MiB | central CPU s | API-tier q | upstream q | pkts out |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, row := range r.Rows {
		if row.Load == nil {
			fmt.Fprintf(w, "| %s | failed: %s |||||||||||||||| \n", row.Design, oneLine(row.Error))
			continue
		}
		l, p := row.Load, row.Load.Percentiles
		qpl := 0.0
		if l.Lookups > 0 {
			qpl = float64(l.Queries) / float64(l.Lookups)
		}
		ct := fmt.Sprint(row.ConntrackNew)
		if row.ConntrackLost {
			ct = "≥" + ct
		}
		where := "node"
		if row.APITierCentral {
			where = "central"
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %v | %v | %v | %v | %v | %d | %d | %s | %.2f | %.1f | %.2f | %.0f (%s) | %d | %d |\n",
			row.Design, l.Rate(), qpl, short(p.P50), short(p.P90), short(p.P99), short(p.P999), short(p.Max),
			l.Failed, l.Timeouts, ct, row.NodeCPU, float64(row.NodePeakRSS)/(1<<20), row.CentralCPU,
			row.APITierQueries, where, row.UpstreamQueries, row.PacketsOut)
	}
}

// ratios compares every design with nodedns, when both were measured.
func (r *Report) ratios() string {
	var base *Row
	for i := range r.Rows {
		if r.Rows[i].Design == "nodedns" && r.Rows[i].Load != nil {
			base = &r.Rows[i]
		}
	}
	if base == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nRatios to nodedns in this run (other ÷ nodedns):\n\n| design | p50 | p99 | ct new | node+central CPU | pkts out | API-tier q |\n|---|--:|--:|--:|--:|--:|--:|\n")
	ratio := func(a, b float64) string {
		if b == 0 {
			if a == 0 {
				return "1x"
			}
			return "∞ (nodedns 0)"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	for _, row := range r.Rows {
		if row.Load == nil || row.Design == "nodedns" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row.Design,
			ratio(float64(row.Load.Percentiles.P50), float64(base.Load.Percentiles.P50)),
			ratio(float64(row.Load.Percentiles.P99), float64(base.Load.Percentiles.P99)),
			ratio(float64(row.ConntrackNew), float64(base.ConntrackNew)),
			ratio(row.NodeCPU+row.CentralCPU, base.NodeCPU+base.CentralCPU),
			ratio(float64(row.PacketsOut), float64(base.PacketsOut)),
			ratio(row.APITierQueries, base.APITierQueries))
	}
	return b.String()
}

func (c *Crosscheck) write(w io.Writer) {
	if c.Error != "" {
		fmt.Fprintf(w, "failed: `%s`\n", oneLine(c.Error))
		return
	}
	fmt.Fprintf(w, "Against %s from the pod namespace, %v each, cached Service FQDNs (A and AAAA):\n\n", c.Design, crosscheckDuration)
	fmt.Fprintf(w, "| client | queries/s answered |\n|---|--:|\n| `%s` | %.0f (lost %d) |\n| generator, closed loop | %.0f |\n| generator, the comparison's fixed load | %.0f |\n\n",
		c.Command, c.DnsperfQPS, c.DnsperfLost, c.GeneratorQPS, c.ComparisonQPS)
	if c.GeneratorQPS > 0 {
		fmt.Fprintf(w, "The comparison's load is %.0f%% of what the generator reaches; the generator reaches %.0f%% of dnsperf's rate.\n", 100*c.ComparisonQPS/c.GeneratorQPS, 100*c.GeneratorQPS/max(c.DnsperfQPS, 1))
	}
}

// chaosSum is one design's chaos rows added up.
type chaosSum struct {
	rows                        int
	lookups, lost, failed, slow uint64
	// worst is the experiment with the most lost and failed lookups.
	worst      string
	worstCount uint64
}

// WriteSummary writes one row per design: the measured run's tail and
// costs beside its chaos rows added up (and its worst experiment), the
// table docs/comparison.md opens with.
func (r *Report) WriteSummary(w io.Writer) {
	sums := map[string]*chaosSum{}
	for _, c := range r.Chaos {
		s := sums[c.Design]
		if s == nil {
			s = &chaosSum{}
			sums[c.Design] = s
		}
		s.rows++
		s.lookups += c.Lookups
		s.lost += c.Lost
		s.failed += c.Failed
		s.slow += c.Slow
		if bad := c.Lost + c.Failed; bad > s.worstCount || s.worst == "" {
			s.worst, s.worstCount = c.Experiment, bad
		}
	}
	fmt.Fprintln(w, "| design | p50 | p99 | p99.9 | max | ct new | node CPU s | node RSS MiB | central CPU s | API-tier q | pkts out | chaos rows | lost | failed | slow | most lost+failed |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, d := range r.DesignsRun() {
		cells := strings.Repeat(" |", 10)
		for _, row := range r.Rows {
			if row.Design != d || row.Load == nil {
				continue
			}
			p := row.Load.Percentiles
			cells = fmt.Sprintf(" %v | %v | %v | %v | %d | %.2f | %.1f | %.2f | %.0f | %d |", short(p.P50), short(p.P99), short(p.P999), short(p.Max),
				row.ConntrackNew, row.NodeCPU, float64(row.NodePeakRSS)/(1<<20), row.CentralCPU, row.APITierQueries, row.PacketsOut)
		}
		s := sums[d]
		if s == nil {
			s = &chaosSum{}
		}
		worst := ""
		if s.worstCount > 0 {
			worst = fmt.Sprintf("%s (%d)", s.worst, s.worstCount)
		}
		fmt.Fprintf(w, "| %s |%s %d | %d | %d | %d | %s |\n", d, cells, s.rows, s.lost, s.failed, s.slow, worst)
	}
}

func writeChaos(w io.Writer, rows []ChaosRow) {
	fmt.Fprintln(w, "| experiment | design | lookups | lost | failed | slow (>1s) | longest | note |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|---|")
	for _, c := range rows {
		note := c.Note
		if c.Error != "" {
			note = "error: " + oneLine(c.Error)
		}
		longest := ""
		if c.Longest > 0 {
			longest = short(c.Longest)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %s | %s |\n", c.Experiment, c.Design, c.Lookups, c.Lost, c.Failed, c.Slow, longest, note)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

// short prints a latency with three significant digits.
func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}
