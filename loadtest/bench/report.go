package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Targets of the frontend, checked by ratios measured side by side.
const (
	targetVsUnbound   = 1.25             // queries per CPU second, frontend / unbound
	targetVsNodeLocal = 2.0              // queries per CPU second, frontend / NodeLocal DNSCache
	targetRSS         = 15 << 20         // peak RSS with targetRSSNames cached
	targetRSSNames    = 10000            // cache entries the RSS target is stated for
	mib               = float64(1 << 20) // bytes per MiB
)

// Row returns the row of server, or nil.
func (r *Report) Row(server string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Server == server {
			return &r.Rows[i]
		}
	}
	return nil
}

// WriteTable prints the comparison table, the frontend's targets as
// measured ratios, and how the numbers were made.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "Cache-hit benchmark, %s, %d names (A/AAAA, 1%% NXDOMAIN; %d for RSS), %s per run, pinning %v, nice %d, real-time %v, load average at start %s\n",
		r.Start.UTC().Format(time.RFC3339), c.Names, c.RSSNames, c.Duration, c.Pin, c.Nice, c.Realtime, r.LoadAvg)
	fmt.Fprintf(&b, "command: %s\n\n", r.Command)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "server\tqps\tserver CPU s\tbusy\tq/CPU-s\tvs unbound\tpeak RSS MiB\tp50 @%dk\tp99 @%dk\tround p99\tCPU %% @%dk\tlost\tmisses\t\n", c.Rate/1000, c.Rate/1000, c.Rate/1000)
	unbound := r.Row(Unbound)
	for _, row := range r.Rows {
		ratio := "-"
		if unbound != nil && unbound.QPerCPU > 0 {
			ratio = fmt.Sprintf("%.2fx", row.QPerCPU/unbound.QPerCPU)
		}
		busy := 0.0
		if row.Dnsperf.RunTime > 0 {
			busy = 100 * row.CPU.Seconds() / row.Dnsperf.RunTime.Seconds()
		}
		rateBusy := 100 * row.RateCPU.Seconds() / c.Duration.Seconds()
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.0f%%\t%.0f\t%s\t%.1f\t%s\t%s\t%s\t%.0f%%\t%d+%d\t%d+%d\t\n",
			row.Server, row.Dnsperf.QPS, row.CPU.Seconds(), busy, row.QPerCPU, ratio,
			float64(row.PeakRSS)/mib, fmtLatency(row.Latency.P50), fmtLatency(row.Latency.P99), fmtLatency(row.Latency.RoundP99), rateBusy,
			row.Dnsperf.Lost, row.Latency.Lost(), row.Upstream, row.RateMiss)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\nbusy: server CPU / run time of the saturating run (below ~95%: dnsperf, not the server, was the limit).\n" +
		"round p99: median of the p99s of the fixed-rate run's one-second rounds (robust to a round disturbed by other work).\n" +
		"CPU % @rate: server CPU / run time of the fixed-rate run. lost: dnsperf run + fixed-rate run.\n" +
		"misses: queries that reached the backend during the saturating run + the fixed-rate run.\n")

	if fe := r.Row(Frontend); fe != nil {
		b.WriteString("\nfrontend targets (measured side by side in this run):\n")
		if unbound != nil {
			fmt.Fprintf(&b, "  q/CPU-s vs unbound:   %.2fx (target >= %.2fx)\n", ratio(fe.QPerCPU, unbound.QPerCPU), targetVsUnbound)
		}
		if nl := r.Row(NodeLocal); nl != nil {
			fmt.Fprintf(&b, "  q/CPU-s vs NodeLocal: %.2fx (target >= %.2fx)\n", ratio(fe.QPerCPU, nl.QPerCPU), targetVsNodeLocal)
		}
		if bl := r.Row(Baseline); bl != nil {
			fmt.Fprintf(&b, "  q/CPU-s vs baseline:  %.2fx (%s; no loss: >= ~0.95x, the spread between runs)\n", ratio(fe.QPerCPU, bl.QPerCPU), c.BaselineBin)
			fmt.Fprintf(&b, "  peak RSS vs baseline: %.1f MiB vs %.1f MiB = %.2fx\n", float64(fe.PeakRSS)/mib, float64(bl.PeakRSS)/mib, ratio(float64(fe.PeakRSS), float64(bl.PeakRSS)))
		}
		note := ""
		if c.RSSNames != targetRSSNames {
			note = fmt.Sprintf("; stated for %d names, this run cached %d", targetRSSNames, c.RSSNames)
		}
		fmt.Fprintf(&b, "  peak RSS:             %.1f MiB with %d names cached = %.2fx of %d MiB (target <= 1x%s)\n",
			float64(fe.PeakRSS)/mib, c.RSSNames, float64(fe.PeakRSS)/float64(targetRSS), targetRSS>>20, note)
		if unbound != nil {
			fmt.Fprintf(&b, "  p99 at %d qps:     %s vs unbound %s = %.2fx; median of rounds %s vs %s = %.2fx (target <= 1x)\n", c.Rate,
				fmtLatency(fe.Latency.P99), fmtLatency(unbound.Latency.P99), ratio(float64(fe.Latency.P99), float64(unbound.Latency.P99)),
				fmtLatency(fe.Latency.RoundP99), fmtLatency(unbound.Latency.RoundP99),
				ratio(float64(fe.Latency.RoundP99), float64(unbound.Latency.RoundP99)))
		}
	}
	for _, row := range r.Rows {
		if row.Profile != "" {
			fmt.Fprintf(&b, "profile of %s's saturating run: %s\n", row.Server, row.Profile)
		}
		if row.ProfError != nil {
			fmt.Fprintf(&b, "no profile of %s: %v\n", row.Server, row.ProfError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// fmtLatency prints microseconds, the scale of loopback cache hits.
func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%dus", d.Microseconds())
}
