// Package gen is a DNS load generator that behaves like the stub
// resolvers of many Kubernetes pods: glibc's search-path expansion with
// ndots:5 and the pod's namespace, A and AAAA in parallel from a new
// socket per lookup, timeouts and retries. It runs open-loop at a fixed
// rate of lookups or closed-loop as fast as answers come, and records
// latency histograms, outcomes and a per-second series.
package gen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// schedSlack is how early the open loop may start a lookup rather than
// sleep for it: Go timers below ~1ms cost more than they are precise, so
// lookups due within it go out together (latency still counts from the
// due time).
const schedSlack = 500 * time.Microsecond

// drainGrace is added to Timeout*Attempts when waiting for lookups still
// running at the end of the run.
const drainGrace = time.Second

// recorder collects outcomes; guarded by mu.
type recorder struct {
	start time.Time

	mu      sync.Mutex
	res     Result
	seconds []*secondStats
	slowest slowList
	// patterns are per mix entry, each with its own Latency.
	patterns []PatternResult

	inflight atomic.Int64
}

type secondStats struct {
	Second
	hist Histogram
}

func (r *recorder) second(t time.Time) *secondStats {
	i := max(int(t.Sub(r.start)/time.Second), 0)
	for len(r.seconds) <= i {
		r.seconds = append(r.seconds, &secondStats{Second: Second{T: len(r.seconds)}})
	}
	return r.seconds[i]
}

func (r *recorder) started(due time.Time, entry int) {
	r.mu.Lock()
	r.res.Lookups++
	r.patterns[entry].Lookups++
	r.second(due).Started++
	r.mu.Unlock()
}

func (r *recorder) skipped(due time.Time) {
	r.mu.Lock()
	r.res.Skipped++
	r.second(due).Skipped++
	r.mu.Unlock()
}

func (r *recorder) done(due, began, end time.Time, entry int, o Outcome, st stats, err error) {
	lat := end.Sub(due)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.patterns[entry].count(o, lat)
	if o != Timeout && r.slowest.admits(lat) {
		r.slowest.add(Slow{
			Due: due, Latency: lat, Late: began.Sub(due), Outcome: o.String(),
			Queries: st.queries, Retries: st.retries,
			SlowestExchange: st.slowest, SlowestName: st.slowestName,
		})
	}
	r.res.Queries += uint64(st.queries)
	r.res.Responses += uint64(st.responses)
	r.res.Retries += uint64(st.retries)
	s := r.second(end)
	if err != nil {
		r.res.Errors++
		if r.res.FirstError == "" {
			r.res.FirstError = err.Error()
		}
	}
	switch o {
	case OK:
		r.res.OK++
		s.OK++
	case NXDomain:
		r.res.NXDomain++
		s.NXDomain++
	case Failed:
		r.res.Failed++
		s.Failed++
	case Timeout:
		r.res.Timeouts++
		s.Timeouts++
		return
	}
	r.res.Latency.Record(lat)
	s.hist.Record(lat)
}

// Run generates load until cfg.Duration has passed or ctx is done, waits
// for the lookups still running (at most Timeout*Attempts), and returns
// the result. An error means the configuration is invalid.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	server := netip.MustParseAddrPort(cfg.Server)
	search := cfg.SearchList()
	rec := &recorder{start: time.Now()}
	rec.res.Latency = new(Histogram)
	for i := range cfg.Mix.Len() {
		rec.patterns = append(rec.patterns, PatternResult{Pattern: cfg.Mix.Pattern(i), Latency: new(Histogram)})
	}
	end := rec.start.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	var idSeq atomic.Uint32
	idSeq.Store(uint32(seed))
	ids := func() uint16 { return uint16(idSeq.Add(40503)) } // odd step: every ID once per 65536

	pods := make([]netip.Addr, cfg.Pods)
	for i := range pods {
		if len(cfg.SourceIPs) > 0 {
			pods[i] = cfg.SourceIPs[i%len(cfg.SourceIPs)]
		}
	}
	one := func(r *rand.Rand, pod int, due time.Time, buf []byte) {
		name, entry := cfg.Mix.Draw(r)
		rec.started(due, entry)
		rec.inflight.Add(1)
		began := time.Now()
		o, st, err := lookup(server, pods[pod], Candidates(name, search, cfg.Ndots), !cfg.NoAAAA, cfg.Timeout, cfg.Attempts, ids, buf)
		rec.inflight.Add(-1)
		rec.done(due, began, time.Now(), entry, o, st, err)
	}

	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		progress(runCtx, cfg, rec)
	}()

	var wg sync.WaitGroup
	if cfg.Rate == 0 {
		rec.res.Mode = "closed"
		for p := range cfg.Pods {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(p)))
				buf := make([]byte, 65535)
				for runCtx.Err() == nil {
					one(r, p, time.Now(), buf)
				}
			})
		}
	} else {
		rec.res.Mode, rec.res.TargetRate = "open", cfg.Rate
		bufs := sync.Pool{New: func() any { b := make([]byte, 65535); return &b }}
		var rmu sync.Mutex
		r := rand.New(rand.NewPCG(seed, 0))
		interval := float64(time.Second) / float64(cfg.Rate)
	loop:
		for i := 0; ; i++ {
			due := rec.start.Add(time.Duration(float64(i) * interval))
			if !due.Before(end) {
				break
			}
			if d := time.Until(due); d > schedSlack {
				select {
				case <-runCtx.Done():
					break loop
				case <-time.After(d):
				}
			} else if runCtx.Err() != nil {
				break
			}
			if rec.inflight.Load() >= int64(cfg.MaxInflight) {
				rec.skipped(due)
				continue
			}
			rec.inflight.Add(1) // counted now so the limit holds before the goroutine runs
			wg.Go(func() {
				rec.inflight.Add(-1)
				rmu.Lock()
				lr := rand.New(rand.NewPCG(r.Uint64(), uint64(i)))
				rmu.Unlock()
				b := bufs.Get().(*[]byte)
				one(lr, i%cfg.Pods, due, *b)
				bufs.Put(b)
			})
		}
	}
	<-runCtx.Done()
	elapsed := time.Since(rec.start)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(cfg.Timeout*time.Duration(cfg.Attempts) + drainGrace):
	}
	<-progressDone

	rec.mu.Lock()
	defer rec.mu.Unlock()
	res := rec.res
	res.Latency = new(Histogram)
	res.Latency.Merge(rec.res.Latency)
	res.Elapsed = min(elapsed, cfg.Duration)
	res.Slowest = append([]Slow(nil), rec.slowest...)
	// Copies: lookups still running past the drain keep recording.
	for _, p := range rec.patterns {
		h := new(Histogram)
		h.Merge(p.Latency)
		p.Latency = h
		res.ByPattern = append(res.ByPattern, p)
	}
	res.fill()
	for _, s := range rec.seconds {
		s.P50, s.P99, s.Max = s.hist.Quantile(0.5), s.hist.Quantile(0.99), s.hist.Max()
		res.Series = append(res.Series, s.Second)
	}
	return &res, nil
}

// progress prints one line per second about the second that just ended.
func progress(ctx context.Context, cfg Config, rec *recorder) {
	if cfg.Progress == nil {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			rec.mu.Lock()
			s := rec.second(now.Add(-time.Second))
			line := fmt.Sprintf("%4ds  started %6d/s  ok %6d  nx %5d  fail %4d  timeout %4d  skipped %4d  p50 %-8v p99 %-8v inflight %d\n",
				s.T+1, s.Started, s.OK, s.NXDomain, s.Failed, s.Timeouts, s.Skipped,
				round(s.hist.Quantile(0.5)), round(s.hist.Quantile(0.99)), rec.inflight.Load())
			rec.mu.Unlock()
			fmt.Fprint(cfg.Progress, line)
		}
	}
}
