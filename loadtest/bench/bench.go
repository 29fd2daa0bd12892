// Package bench runs the side-by-side cache-hit benchmark: the nodedns
// frontend, unbound, dnsmasq and CoreDNS configured as NodeLocal DNSCache,
// each in front of the same fake backend, driven by the same dnsperf query
// file in one run: saturated one after the other, then latency rounds with
// the servers taking turns.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Row is one server's measurements.
type Row struct {
	Server string

	// Saturating dnsperf run, cache warm.
	Dnsperf   DnsperfResult
	CPU       time.Duration // server user+system CPU during the run
	QPerCPU   float64       // queries completed per server CPU second
	Upstream  int64         // queries that reached the backend during the run (cache misses)
	RateMiss  int64         // queries that reached the backend during the fixed-rate run
	Warm      DnsperfResult // the warm-up pass
	PeakRSS   uint64        // VmHWM at the end, bytes
	Latency   LatencyResult // fixed-rate run
	RateCPU   time.Duration // server user+system CPU during the fixed-rate run
	Profile   string        // perf report of the saturating run, if taken
	ProfError error         // why it could not be taken
}

// Report is the result of a run.
type Report struct {
	Config  Config
	Command string // the command line that produced it
	Start   time.Time
	LoadAvg string // /proc/loadavg at the start: other work on the machine skews qps
	Rows    []Row
}

// Run benchmarks cfg.Servers one after the other and returns the report.
// Progress goes to progress. It fails only when a tool is missing or a
// server cannot be started or stops answering; every process it started
// is stopped before it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg.Servers = cfg.WithBaseline()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTools(cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	dir, err := filepath.Abs(cfg.OutDir)
	if err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	rep := &Report{Config: cfg, Command: strings.Join(os.Args, " "), Start: time.Now()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.LoadAvg = strings.TrimSpace(string(b))
	}

	all := Queries(cfg.RSSNames)
	qs := all[:cfg.Names]
	queryFile := filepath.Join(dir, "queries.txt")
	if err := WriteQueryFile(queryFile, qs); err != nil {
		return nil, err
	}
	rssFile := filepath.Join(dir, "queries-rss.txt")
	if err := WriteQueryFile(rssFile, all); err != nil {
		return nil, err
	}

	client, server := sched{cpu: -1, nice: cfg.Nice}, sched{cpu: -1, nice: cfg.Nice}
	if cfg.Pin {
		client.cpu, server.cpu = ClientCPU, ServerCPU
		restore, err := pinSelf(ClientCPU)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if cfg.Nice != 0 {
		restore, err := niceSelf(cfg.Nice)
		if err != nil {
			return nil, err
		}
		defer restore()
	}

	be, err := StartBackend()
	if err != nil {
		return nil, err
	}
	defer be.Close()
	fmt.Fprintf(progress, "bench: %d names in %s, backend %s, load average %s\n", len(qs), queryFile, be.Addr, rep.LoadAvg)

	// Each server in turn: start, warm up, saturate. Servers stay up (idle)
	// until the end, so that the latency rounds can interleave them.
	var runners []*runner
	defer func() {
		for _, r := range runners {
			r.stop()
		}
	}()
	for _, name := range cfg.Servers {
		r := &runner{cfg: cfg, dir: dir, name: name, be: be, qs: qs, queryFile: queryFile,
			rssFile: rssFile, client: client, server: server, progress: progress, row: Row{Server: name}}
		runners = append(runners, r)
		if err := r.start(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := r.saturate(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}

	// Fixed-rate runs in rounds, servers taking turns (the first one
	// rotating), so that changes in other work on the machine during the
	// run fall on every server alike.
	rounds := max(1, int(cfg.Duration/latencyRound))
	fmt.Fprintf(progress, "bench: %d queries/s in %d rounds of %s per server, servers taking turns\n", cfg.Rate, rounds, cfg.Duration/time.Duration(rounds))
	for i := range rounds {
		for j := range runners {
			r := runners[(i+j)%len(runners)]
			if err := r.latencyRound(ctx, cfg.Duration/time.Duration(rounds)); err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}

	for _, r := range runners {
		if err := r.finish(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		rep.Rows = append(rep.Rows, r.row)
	}
	return rep, nil
}

// checkTools fails with a precise message when a program is missing.
func checkTools(cfg Config) error {
	need := map[string]string{"dnsperf": "Debian package dnsperf"}
	if cfg.Pin {
		need["taskset"] = "Debian package util-linux (or run with pinning off)"
	}
	if cfg.Nice != 0 {
		need["nice"] = "Debian package coreutils (or run with nice 0)"
	}
	if cfg.Realtime {
		need["chrt"] = "Debian package util-linux (or run without real-time scheduling)"
	}
	for _, s := range cfg.Servers {
		switch s {
		case Frontend:
			need[cfg.FrontendBin] = "run `make build`"
		case Baseline:
			need[cfg.BaselineBin] = "build the frontend to compare with, e.g. from `git archive`"
		case Unbound:
			need["unbound"] = "Debian package unbound"
		case Dnsmasq:
			need["dnsmasq"] = "Debian package dnsmasq-base"
		case NodeLocal:
			need[cfg.CoreDNSBin] = "run `make build`"
		}
	}
	var errs []error
	for prog, hint := range need {
		if _, err := lookPath(prog); err != nil {
			errs = append(errs, fmt.Errorf("%s not found (%s)", prog, hint))
		}
	}
	return errors.Join(errs...)
}

// latencyRound is the length of one server's turn in the fixed-rate run.
const latencyRound = time.Second

// runner benchmarks one server.
type runner struct {
	cfg                  Config
	dir, name, queryFile string
	rssFile              string // RSSNames names, warmed before reading the peak RSS
	be                   *Backend
	qs                   []Query
	client, server       sched // where dnsperf and the servers run
	progress             io.Writer
	port                 int // the server's DNS port, set once it is chosen
	// scrape lists the server's HTTP endpoints (metrics, health), fetched
	// as Prometheus and the kubelet would before the peak RSS is read.
	scrape []string

	p       *process       // set by start
	addr    string         // the server's DNS address, set by start
	row     Row            // filled phase by phase
	samples latencySamples // of all latency rounds
}

// Timeouts of the harness.
const (
	// readyTimeout covers a CoreDNS start and the frontend's wait for
	// the backend's readiness.
	readyTimeout = 20 * time.Second
	probeTimeout = 200 * time.Millisecond
	// warmOutstanding keeps the warm-up pass below every server's limit
	// of concurrent forwarded queries (dnsmasq's default is 150), so the
	// pass fills the cache instead of being dropped.
	warmOutstanding = 50
)

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "%-9s "+format+"\n", append([]any{r.name}, args...)...)
}

// start starts the server, waits until it answers and warms its cache.
func (r *runner) start(ctx context.Context) error {
	dnsPort, err := freePort()
	if err != nil {
		return err
	}
	r.port = dnsPort
	metricsPort, err := freePort()
	if err != nil {
		return err
	}
	healthPort, err := freePort()
	if err != nil {
		return err
	}
	bh, bp, _ := net.SplitHostPort(r.be.Addr)
	env := serverEnv{dir: r.dir, port: dnsPort, backend: r.be.Addr, backendHost: bh, backendPort: bp,
		readyURL: r.be.ReadyURL, metrics: "127.0.0.1:" + strconv.Itoa(metricsPort),
		health: "127.0.0.1:" + strconv.Itoa(healthPort), cfg: r.cfg}
	argv, err := serverArgv(r.name, env)
	if err != nil {
		return err
	}
	if r.name == Frontend || r.name == Baseline {
		r.scrape = []string{"http://" + env.metrics + "/metrics", "http://" + env.health + "/health", "http://" + env.health + "/ready"}
	}
	r.p, err = startProcess(r.name, argv, r.server, filepath.Join(r.dir, r.name+".log"))
	if err != nil {
		return err
	}
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(dnsPort))
	r.logf("pid %d on %s: %s", r.p.pid(), r.addr, strings.Join(argv, " "))
	if err := r.waitReady(ctx, r.p, r.addr); err != nil {
		return err
	}

	// Warm-up: one pass over the file fills the cache.
	r.row.Warm, err = r.dnsperf(ctx, 1, 0, "warm")
	if err != nil {
		return err
	}
	r.logf("warm-up: %d/%d answered, backend saw %d queries", r.row.Warm.Completed, r.row.Warm.Sent, r.be.Queries())
	return nil
}

// stop stops the server if it was started.
func (r *runner) stop() {
	if r.p != nil {
		r.p.stop()
	}
}

// realtime puts the server and the harness under real-time scheduling, if
// the config asks for it, and returns the function that undoes it.
func (r *runner) realtime() (undo func(), err error) {
	if !r.cfg.Realtime {
		return func() {}, nil
	}
	undo = func() { _ = errors.Join(setRealtime(r.p.pid(), false, r.cfg.Nice), setRealtime(0, false, r.cfg.Nice)) }
	if err := errors.Join(setRealtime(r.p.pid(), true, 0), setRealtime(0, true, 0)); err != nil {
		undo()
		return nil, fmt.Errorf("real-time scheduling: %w", err)
	}
	return undo, nil
}

// saturate runs dnsperf for the configured duration and measures the
// server's CPU over it.
func (r *runner) saturate(ctx context.Context) error {
	undo, err := r.realtime()
	if err != nil {
		return err
	}
	defer undo()
	row := &r.row
	st0, err := r.p.stat()
	if err != nil {
		return err
	}
	up0 := r.be.Queries()
	var profDone chan struct{}
	if r.cfg.Profile {
		profDone = make(chan struct{})
		go func() {
			defer close(profDone)
			row.Profile, row.ProfError = perfRecord(ctx, r.p.pid(), r.cfg.Duration, filepath.Join(r.dir, r.name+".perf"))
		}()
	}
	row.Dnsperf, err = r.dnsperfFile(ctx, r.queryFile, 0, r.cfg.Duration, "qps", r.cfg.Realtime)
	if profDone != nil {
		<-profDone
		if row.ProfError != nil {
			r.logf("no CPU profile: %v", row.ProfError)
		}
	}
	if err != nil {
		return err
	}
	st1, err := r.p.stat()
	if err != nil {
		return err
	}
	row.Upstream = r.be.Queries() - up0
	row.CPU = st1.CPU() - st0.CPU()
	if row.CPU > 0 {
		row.QPerCPU = float64(row.Dnsperf.Completed) / row.CPU.Seconds()
	}
	r.logf("saturated: %.0f qps, %d lost, server CPU %.2fs, %.0f queries per CPU second, %d misses",
		row.Dnsperf.QPS, row.Dnsperf.Lost, row.CPU.Seconds(), row.QPerCPU, row.Upstream)
	return nil
}

// latencyRound sends the fixed rate for d, adding the latencies and the
// server's CPU (what a server spends below its capacity, where one that
// polls pays for it) to the row.
func (r *runner) latencyRound(ctx context.Context, d time.Duration) error {
	undo, err := r.realtime()
	if err != nil {
		return err
	}
	defer undo()
	st0, err := r.p.stat()
	if err != nil {
		return err
	}
	up0 := r.be.Queries()
	s, err := runFixedRate(ctx, r.addr, r.qs, r.cfg.Rate, d)
	if err != nil {
		return err
	}
	r.row.RateMiss += r.be.Queries() - up0
	st1, err := r.p.stat()
	if err != nil {
		return err
	}
	r.samples.add(s)
	r.row.RateCPU += st1.CPU() - st0.CPU()
	return nil
}

// finish summarizes the latency rounds, fills the cache to RSSNames
// entries and reads the peak RSS.
func (r *runner) finish(ctx context.Context) error {
	row := &r.row
	row.Latency = r.samples.result()
	r.logf("%d qps: p50 %s p99 %s p99.9 %s, median of the rounds' p99 %s, %d/%d lost, server CPU %.2fs, %d misses", r.cfg.Rate,
		row.Latency.P50, row.Latency.P99, row.Latency.P999, row.Latency.RoundP99, row.Latency.Lost(), row.Latency.Sent,
		row.RateCPU.Seconds(), row.RateMiss)

	rssWarm, err := r.dnsperfFile(ctx, r.rssFile, 1, 0, "rss", false)
	if err != nil {
		return err
	}
	for _, u := range r.scrape {
		if err := fetch(ctx, u); err != nil {
			return err
		}
	}
	if err := r.p.alive(); err != nil {
		return err
	}
	st, err := r.p.status()
	if err != nil {
		return err
	}
	row.PeakRSS = st.VmHWM
	r.logf("peak RSS %.1f MiB (now %.1f MiB) after a pass over %d names (%d answered)",
		float64(st.VmHWM)/mib, float64(st.VmRSS)/mib, r.cfg.RSSNames, rssWarm.Completed)
	return nil
}

// fetch GETs url and reads the whole answer, which must be 200 OK.
func fetch(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (r *runner) dnsperf(ctx context.Context, passes int, limit time.Duration, phase string) (DnsperfResult, error) {
	return r.dnsperfFile(ctx, r.queryFile, passes, limit, phase, false)
}

func (r *runner) dnsperfFile(ctx context.Context, file string, passes int, limit time.Duration, phase string, rt bool) (DnsperfResult, error) {
	s := r.client
	s.rt = rt
	outstanding := dnsperfOutstanding
	if passes > 0 {
		outstanding = warmOutstanding
	}
	return runDnsperf(ctx, dnsperfArgs{
		sched: s, host: "127.0.0.1", port: r.port, queryFile: file,
		passes: passes, limit: limit, logPath: filepath.Join(r.dir, r.name+"."+phase+".dnsperf.txt"),
		outstanding: outstanding,
	})
}

// waitReady polls addr with a query until the server answers it.
func (r *runner) waitReady(ctx context.Context, p *process, addr string) error {
	c := &dns.Client{Net: "udp", Timeout: probeTimeout}
	q := new(dns.Msg)
	q.SetQuestion(r.qs[0].Name, r.qs[0].Qtype)
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if err := p.alive(); err != nil {
			return err
		}
		resp, _, err := c.ExchangeContext(ctx, q, addr)
		if err == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("answer %s with %d records", dns.RcodeToString[resp.Rcode], len(resp.Answer))
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("not answering on %s after %s: %v (log: %s)", addr, readyTimeout, lastErr, p.log.Name())
}

// perfRecord samples pid's call stacks (user and kernel) with perf for d
// and writes the recording to base.data and a flat report by shared object
// and symbol to base.txt, which it returns. Symbols of Go binaries need a
// build without -ldflags=-s; the split between the binary and [kernel]
// (the syscall share) shows either way.
func perfRecord(ctx context.Context, pid int, d time.Duration, base string) (string, error) {
	perf, err := lookPath("perf")
	if err != nil {
		return "", fmt.Errorf("profile: %w (Debian package linux-perf)", err)
	}
	data, txt := base+".data", base+".txt"
	rec := exec.CommandContext(ctx, perf, "record", "-q", "-F", "999", "-g", "-p", strconv.Itoa(pid), "-o", data,
		"--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
	if out, err := rec.CombinedOutput(); err != nil {
		return "", fmt.Errorf("perf record: %w: %s", err, out)
	}
	rep := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children",
		"--sort", "dso,symbol", "--percent-limit", "0.5", "-g", "none")
	out, err := rep.Output()
	if err != nil {
		return "", fmt.Errorf("perf report: %w", err)
	}
	return txt, os.WriteFile(txt, out, 0o644)
}
