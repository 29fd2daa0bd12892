package gen

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Result is a finished run.
type Result struct {
	// Mode is "open" (fixed rate) or "closed" (as fast as answers come).
	Mode string `json:"mode"`
	// TargetRate is the open loop's lookups per second.
	TargetRate int           `json:"target_rate,omitempty"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// Lookups started, and how they ended.
	Lookups  uint64 `json:"lookups"`
	OK       uint64 `json:"ok"`
	NXDomain uint64 `json:"nxdomain"`
	Failed   uint64 `json:"failed"`
	Timeouts uint64 `json:"timeouts"`
	// Skipped are open-loop lookups not started because MaxInflight
	// lookups were outstanding.
	Skipped uint64 `json:"skipped"`
	// Errors are local errors (socket creation and the like).
	Errors uint64 `json:"errors"`
	// Queries and Responses count datagrams; Retries the resent ones.
	Queries   uint64 `json:"queries"`
	Responses uint64 `json:"responses"`
	Retries   uint64 `json:"retries"`
	// Latency of the lookups that ended with an answer (OK, NXDomain,
	// Failed), from the time each was due (open loop: no coordinated
	// omission) to its end. Timeouts are counted, not timed.
	Latency *Histogram `json:"-"`
	// Summary of Latency.
	Percentiles Percentiles `json:"latency"`
	// Buckets is Latency for JSON (see Hist).
	Buckets    []Bucket      `json:"histogram"`
	MinLatency time.Duration `json:"min_ns"`
	// Series has one entry per second of the run.
	Series []Second `json:"series"`
	// FirstError is the first local error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Slowest are the slowest answered lookups, slowest first (see Slow).
	Slowest []Slow `json:"slowest,omitempty"`
	// ByPattern splits the lookups by the mix entry that drew their
	// name: one per entry, in the mix's order.
	ByPattern []PatternResult `json:"by_pattern,omitempty"`
}

// PatternResult is the lookups whose names one pattern of the mix drew.
type PatternResult struct {
	// Pattern is the entry's pattern as written in the mix.
	Pattern string `json:"pattern"`
	// Lookups started, and how they ended (as in Result).
	Lookups  uint64 `json:"lookups"`
	OK       uint64 `json:"ok"`
	NXDomain uint64 `json:"nxdomain"`
	Failed   uint64 `json:"failed"`
	Timeouts uint64 `json:"timeouts"`
	// Latency of the pattern's answered lookups, as Result's.
	Latency     *Histogram    `json:"-"`
	Percentiles Percentiles   `json:"latency"`
	Buckets     []Bucket      `json:"histogram"`
	MinLatency  time.Duration `json:"min_ns"`
}

// Answered returns the pattern's lookups that got an answer.
func (p *PatternResult) Answered() uint64 { return p.OK + p.NXDomain + p.Failed }

// Hist returns Latency, rebuilt from Buckets after JSON decoding.
func (p *PatternResult) Hist() *Histogram {
	if p.Latency != nil {
		return p.Latency
	}
	return HistogramFrom(p.Buckets, p.MinLatency, p.Percentiles.Max, p.Percentiles.Mean)
}

// fill sets the JSON summary of Latency.
func (p *PatternResult) fill() {
	p.Percentiles = Summarize(p.Latency)
	p.Buckets = p.Latency.Buckets()
	p.MinLatency = p.Latency.Min()
}

// count adds the outcome of one lookup (its latency, when answered).
func (p *PatternResult) count(o Outcome, lat time.Duration) {
	switch o {
	case OK:
		p.OK++
	case NXDomain:
		p.NXDomain++
	case Failed:
		p.Failed++
	case Timeout:
		p.Timeouts++
		return
	}
	p.Latency.Record(lat)
}

// Percentiles summarises a latency histogram.
type Percentiles struct {
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

// Summarize reads the percentiles of h.
func Summarize(h *Histogram) Percentiles {
	return Percentiles{P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max(), Mean: h.Mean()}
}

// Second is one second of the run: lookups started in it, and lookups
// that ended in it by outcome with the latency of the answered ones.
type Second struct {
	T        int           `json:"t"`
	Started  uint64        `json:"started"`
	OK       uint64        `json:"ok"`
	NXDomain uint64        `json:"nxdomain"`
	Failed   uint64        `json:"failed"`
	Timeouts uint64        `json:"timeouts"`
	Skipped  uint64        `json:"skipped"`
	Inflight int64         `json:"inflight"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	Max      time.Duration `json:"max_ns"`
}

// Hist returns Latency, rebuilt from Buckets after JSON decoding.
func (r *Result) Hist() *Histogram {
	if r.Latency != nil {
		return r.Latency
	}
	return HistogramFrom(r.Buckets, r.MinLatency, r.Percentiles.Max, r.Percentiles.Mean)
}

// Merge combines the results of runs of the same load (rounds): counts
// add up, latencies merge, series are appended in order.
func Merge(rs ...*Result) *Result {
	out := &Result{Latency: new(Histogram)}
	var slow slowList
	// Patterns merge by pattern and occurrence (a mix may hold one
	// pattern twice), so that rounds of one mix line up entry by entry.
	type patternKey struct {
		pattern string
		nth     int
	}
	patterns := map[patternKey]int{}
	for _, r := range rs {
		if r == nil {
			continue
		}
		out.Mode, out.TargetRate = r.Mode, r.TargetRate
		out.Elapsed += r.Elapsed
		out.Lookups += r.Lookups
		out.OK += r.OK
		out.NXDomain += r.NXDomain
		out.Failed += r.Failed
		out.Timeouts += r.Timeouts
		out.Skipped += r.Skipped
		out.Errors += r.Errors
		out.Queries += r.Queries
		out.Responses += r.Responses
		out.Retries += r.Retries
		out.Latency.Merge(r.Hist())
		for _, s := range r.Series {
			s.T = len(out.Series)
			out.Series = append(out.Series, s)
		}
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		for _, s := range r.Slowest {
			if slow.admits(s.Latency) {
				slow.add(s)
			}
		}
		nth := map[string]int{}
		for i := range r.ByPattern {
			p := &r.ByPattern[i]
			k := patternKey{p.Pattern, nth[p.Pattern]}
			nth[p.Pattern]++
			j, ok := patterns[k]
			if !ok {
				j = len(out.ByPattern)
				patterns[k] = j
				out.ByPattern = append(out.ByPattern, PatternResult{Pattern: p.Pattern, Latency: new(Histogram)})
			}
			o := &out.ByPattern[j]
			o.Lookups += p.Lookups
			o.OK += p.OK
			o.NXDomain += p.NXDomain
			o.Failed += p.Failed
			o.Timeouts += p.Timeouts
			o.Latency.Merge(p.Hist())
		}
	}
	out.Slowest = slow
	out.fill()
	return out
}

// fill sets the JSON summary of Latency and of each pattern's.
func (r *Result) fill() {
	r.Percentiles = Summarize(r.Latency)
	r.Buckets = r.Latency.Buckets()
	r.MinLatency = r.Latency.Min()
	for i := range r.ByPattern {
		r.ByPattern[i].fill()
	}
}

// Answered returns the lookups that got an answer, positive or not.
func (r *Result) Answered() uint64 { return r.OK + r.NXDomain + r.Failed }

// Rate returns the answered lookups per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Answered()) / r.Elapsed.Seconds()
}

// QueryRate returns the DNS queries sent per second.
func (r *Result) QueryRate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Queries) / r.Elapsed.Seconds()
}

// WriteJSON writes the result as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes a human-readable summary.
func (r *Result) WriteText(w io.Writer) error {
	p := r.Percentiles
	rate := ""
	if r.Mode == "open" {
		rate = fmt.Sprintf(" (target %d/s)", r.TargetRate)
	}
	_, err := fmt.Fprintf(w, `mode        %s%s, %.1fs
lookups     %d: ok %d, nxdomain %d, failed %d, timeout %d, skipped %d, local errors %d
rate        %.0f lookups/s answered, %.0f queries/s sent (%d retries, %d responses)
latency     p50 %v  p90 %v  p99 %v  p99.9 %v  max %v  mean %v
`, r.Mode, rate, r.Elapsed.Seconds(), r.Lookups, r.OK, r.NXDomain, r.Failed, r.Timeouts, r.Skipped, r.Errors,
		r.Rate(), r.QueryRate(), r.Retries, r.Responses,
		round(p.P50), round(p.P90), round(p.P99), round(p.P999), round(p.Max), round(p.Mean))
	if err == nil && r.FirstError != "" {
		_, err = fmt.Fprintf(w, "first error %s\n", r.FirstError)
	}
	if err == nil && len(r.ByPattern) > 1 {
		err = r.writePatterns(w)
	}
	return err
}

// writePatterns writes one line per pattern: its share of the lookups,
// outcomes, and the latency of its answered lookups.
func (r *Result) writePatterns(w io.Writer) error {
	width := 0
	for _, p := range r.ByPattern {
		width = max(width, len(p.Pattern))
	}
	if _, err := fmt.Fprintf(w, "by pattern  share of lookups; ok/nxdomain/failed/timeout; latency of the answered\n"); err != nil {
		return err
	}
	for _, p := range r.ByPattern {
		share := 0.0
		if r.Lookups > 0 {
			share = 100 * float64(p.Lookups) / float64(r.Lookups)
		}
		q := p.Percentiles
		if _, err := fmt.Fprintf(w, "  %-*s %5.1f%%  %d/%d/%d/%d  p50 %v  p99 %v  max %v\n", width, p.Pattern, share,
			p.OK, p.NXDomain, p.Failed, p.Timeouts, round(q.P50), round(q.P99), round(q.Max)); err != nil {
			return err
		}
	}
	return nil
}

// round keeps three significant digits for display.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
