package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// Config is one comparison run: the same load and mix against every
// design, one after the other, each on a fresh node.
type Config struct {
	// Designs to run, by name, in table order.
	Designs []string
	// Rate is the lookups per second of the measured run (open loop).
	Rate int
	// Duration of the measured load per design, split into Rounds runs.
	Duration time.Duration
	// Rounds interleaves the designs: each runs Duration/Rounds per round.
	Rounds int
	// Warmup is an unmeasured run at Rate before it (fills caches).
	Warmup time.Duration
	// Pods is the number of pod addresses the lookups come from.
	Pods int
	// Mix is the generator's -mix.
	Mix string
	// Timeout and Attempts are the pods' resolv.conf options.
	Timeout  time.Duration
	Attempts int
	// Seed makes the names reproducible across designs.
	Seed uint64
	// OutDir receives report.md, results.json, logs and generator output.
	OutDir string
	// BinDir holds the nodedns binaries.
	BinDir string
	// Dnsperf adds a dnsperf run against the first design's nameserver
	// (cross-check that the generator is not the bottleneck).
	Dnsperf bool
	// Chaos runs the chaos experiments after the comparison.
	Chaos bool
	// ChaosDuration is the length of each chaos run.
	ChaosDuration time.Duration
	// ChaosOnly, when set, runs only the experiments whose name
	// contains it ("flood", "SIGKILL").
	ChaosOnly string
	// GeneratorRealtime runs the load generator under SCHED_RR (chrt -r
	// 1, as root): the designs' processes, the control plane and other
	// work on the machine then cannot make it begin a lookup late, which
	// the latency (counted from when the lookup was due) would blame on
	// the design being measured. Every design alike.
	GeneratorRealtime bool

	// noisyPod sends the load from the node's NoisyIP alone, not from
	// its PodIPs.
	noisyPod bool
}

// DefaultConfig is the published comparison's configuration.
func DefaultConfig() Config {
	return Config{
		Designs:       allDesigns(),
		Rate:          500,
		Duration:      30 * time.Second,
		Rounds:        3,
		Warmup:        5 * time.Second,
		Pods:          50,
		Mix:           "default",
		Timeout:       gen.DefaultTimeout,
		Attempts:      gen.DefaultAttempts,
		Seed:          1,
		OutDir:        "out/compare",
		BinDir:        "bin",
		ChaosDuration: 20 * time.Second,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if len(c.Designs) == 0 {
		errs = append(errs, errors.New("no designs"))
	}
	for _, d := range c.Designs {
		if _, ok := DesignByName(d); !ok {
			errs = append(errs, fmt.Errorf("unknown design %q", d))
		}
	}
	if c.Rate <= 0 || c.Duration <= 0 || c.Pods <= 0 || c.Warmup < 0 || c.Rounds < 1 || c.roundDuration() < time.Second {
		errs = append(errs, fmt.Errorf("rate %d, duration %v, rounds %d, pods %d, warmup %v: need positive values and at least 1s per round", c.Rate, c.Duration, c.Rounds, c.Pods, c.Warmup))
	}
	if _, err := gen.ParseMix(c.Mix); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// allDesigns are the names of every design, in table order.
func allDesigns() []string {
	var out []string
	for _, d := range Designs {
		out = append(out, d.Name)
	}
	return out
}

// ParseDesigns reads a comma-separated list; "all" is every design.
func ParseDesigns(s string) ([]string, error) {
	if s == "all" {
		return allDesigns(), nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if _, ok := DesignByName(n); !ok {
			return nil, fmt.Errorf("unknown design %q (have %s)", n, designNames())
		}
		out = append(out, n)
	}
	return out, nil
}

func designNames() string { return strings.Join(allDesigns(), ", ") }

// DesignsRun names the designs of the report's rows and chaos rows, in
// the order they ran: compare's last line.
func (r *Report) DesignsRun() []string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, row := range r.Rows {
		add(row.Design)
	}
	for _, c := range r.Chaos {
		add(c.Design)
	}
	return out
}

// Row is one design's measurements.
type Row struct {
	Design string `json:"design"`
	Title  string `json:"title"`
	// Load is the generator's result of the measured run.
	Load *gen.Result `json:"load"`
	// ConntrackNew is the conntrack entries created in the node's
	// namespace during the measured runs; ConntrackLost says events were
	// dropped (the count is then a lower bound). ConntrackLive is the
	// table's largest size at the end of a run.
	ConntrackNew  int64 `json:"conntrack_new"`
	ConntrackLost bool  `json:"conntrack_events_lost,omitempty"`
	ConntrackLive int   `json:"conntrack_live"`
	// NodeCPU is the CPU seconds of the node's DNS processes during the
	// run; NodePeakRSS the sum of their peak RSS over their lifetime.
	NodeCPU     float64 `json:"node_dns_cpu_seconds"`
	NodePeakRSS int64   `json:"node_dns_peak_rss_bytes"`
	// NodeRunqueueWait is how long the node's DNS processes' threads
	// waited, runnable, for a CPU during the run (schedstat).
	NodeRunqueueWait time.Duration `json:"node_dns_runqueue_wait_ns"`
	// CentralCPU is the CPU seconds during the run of the DNS processes
	// on the other node: the central CoreDNS, and for nodedns also that
	// node's nodedns backend (the second fallback endpoint).
	CentralCPU float64 `json:"central_cpu_seconds"`
	// APITierQueries is the increase of coredns_dns_requests_total of the
	// CoreDNS that watches the API server (central or on the node).
	APITierQueries float64 `json:"api_tier_queries"`
	APITierCentral bool    `json:"api_tier_central"`
	// UpstreamQueries reached the resolvers outside the cluster.
	UpstreamQueries int64 `json:"upstream_queries"`
	// PacketsOut left the node toward other nodes (NodeUplink transmit).
	PacketsOut uint64 `json:"packets_out"`
	// Error is set when the design could not be measured.
	Error string `json:"error,omitempty"`
}

// Report is a comparison run.
type Report struct {
	Config  Config      `json:"config"`
	Command string      `json:"command"`
	Started time.Time   `json:"started"`
	Machine string      `json:"machine"`
	Rows    []Row       `json:"rows"`
	Dnsperf *Crosscheck `json:"dnsperf,omitempty"`
	Chaos   []ChaosRow  `json:"chaos,omitempty"`
	// Plots are the PNG files written beside the report.
	Plots []string `json:"plots,omitempty"`
}

// Compare runs the comparison in env and returns the report; progress
// goes to w. Every design gets its own node, all are started first; then
// the measured load runs in Rounds rounds, each design in turn, so that a
// burst of other work on the machine hits every design alike. A design
// that fails is reported in its row and the others still run.
func Compare(ctx context.Context, e *Env, cfg Config, w io.Writer) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep = &Report{Config: cfg, Started: time.Now().UTC(), Machine: machine()}
	var live []*trial
	defer func() {
		for _, t := range live {
			err = errors.Join(err, t.close())
		}
	}()
	for _, name := range cfg.Designs {
		d, _ := DesignByName(name)
		fmt.Fprintf(w, "== %s: %s\n", d.Name, d.Title)
		t, err := e.startTrial(ctx, "node-"+d.Name, d, cfg, w)
		if t != nil {
			live = append(live, t)
		}
		if err != nil {
			fmt.Fprintf(w, "== %s failed: %v\n", d.Name, err)
			t.fail(err)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, t := range live {
			if t.err != nil {
				continue
			}
			fmt.Fprintf(w, "== round %d/%d: %s, %v at %d lookups/s from %d pods, mix %s\n", round, cfg.Rounds, t.design.Name, cfg.roundDuration(), cfg.Rate, cfg.Pods, cfg.Mix)
			if err := t.measure(ctx, fmt.Sprintf("%s-round%d", t.design.Name, round), w); err != nil {
				fmt.Fprintf(w, "== %s failed: %v\n", t.design.Name, err)
				t.fail(err)
			}
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
		}
	}
	for _, t := range live {
		rep.Rows = append(rep.Rows, t.row())
	}
	if cfg.Dnsperf && ctx.Err() == nil {
		cc, err := e.crosscheck(ctx, cfg, live, w)
		if err != nil {
			fmt.Fprintf(w, "== dnsperf cross-check failed: %v\n", err)
			cc = &Crosscheck{Error: err.Error()}
		}
		rep.Dnsperf = cc
	}
	var closeErr error
	if cfg.Chaos && ctx.Err() == nil {
		// The measured designs are done and chaos starts every design on
		// a fresh node: stop them first, so that the chaos cluster holds
		// no idle node of theirs (nodedns's would still be an endpoint of
		// the fallback Service).
		for _, t := range live {
			closeErr = errors.Join(closeErr, t.close())
		}
		live = nil
		rep.Chaos = e.chaos(ctx, cfg, w)
	}
	return rep, errors.Join(ctx.Err(), closeErr)
}

// roundDuration is the length of one measured run.
func (c Config) roundDuration() time.Duration {
	return (c.Duration / time.Duration(max(c.Rounds, 1))).Round(100 * time.Millisecond)
}

// trial is one design running on its node, with its measurements so far.
type trial struct {
	e      *Env
	cfg    Config
	design Design
	node   *simNode
	run    *running
	loads  []*gen.Result
	sum    Row
	err    error
}

func (t *trial) fail(err error) {
	if t != nil && t.err == nil {
		t.err = err
	}
}

// startTrial builds the design's node, starts the design and warms it up.
func (e *Env) startTrial(ctx context.Context, node string, d Design, cfg Config, w io.Writer) (*trial, error) {
	t := &trial{e: e, cfg: cfg, design: d, sum: Row{Design: d.Name, Title: d.Title}}
	n, err := e.addNode(ctx, node)
	if err != nil {
		return t, err
	}
	t.node = n
	if t.run, err = d.start(ctx, e, n); err != nil {
		return t, err
	}
	t.sum.APITierCentral = t.run.Central
	if err := waitDNS(ctx, nil, n.Pod.Name, t.run.Nameserver, time.Minute); err != nil {
		return t, err
	}
	if cfg.Warmup > 0 {
		fmt.Fprintf(w, "   warm-up %v at %d lookups/s\n", cfg.Warmup, cfg.Rate)
		if _, err := e.generate(ctx, n, t.run.Nameserver, cfg, cfg.Warmup, d.Name+"-warmup", nil); err != nil {
			return t, err
		}
	}
	return t, t.run.alive()
}

func (t *trial) close() error {
	var errs []error
	if t.run != nil {
		errs = append(errs, t.run.Stop())
	}
	if t.node != nil {
		errs = append(errs, t.node.Close())
	}
	return errors.Join(errs...)
}

// row returns the design's measurements over all rounds.
func (t *trial) row() Row {
	r := t.sum
	if len(t.loads) > 0 {
		r.Load = gen.Merge(t.loads...)
	}
	if t.run != nil {
		r.NodePeakRSS = procsPeakRSS(t.run.Procs)
	}
	if t.err != nil {
		r.Error = t.err.Error()
	}
	return r
}

// measure runs one measured round and adds its counters to the row.
func (t *trial) measure(ctx context.Context, name string, w io.Writer) error {
	e, n, r := t.e, t.node, t.run
	apiBefore, err := scrapeRequests(ctx, r.APITier)
	if err != nil {
		return err
	}
	txBefore, err := txPackets(ctx, n.Netns, NodeUplink)
	if err != nil {
		return err
	}
	upBefore := e.upstream.queries.Load()
	central := append([]*process{e.centralDNS}, r.Remote...)
	cpuBefore, centralBefore := procsCPU(r.Procs), procsCPU(central)
	waitBefore := procsRunqueueWait(r.Procs)
	ct, err := watchConntrack(n.Netns)
	if err != nil {
		return err
	}
	res, genErr := e.generate(ctx, n, r.Nameserver, t.cfg, t.cfg.roundDuration(), name, w)
	ctNew, ctLost := ct.Stop()
	t.sum.ConntrackNew += ctNew
	t.sum.ConntrackLost = t.sum.ConntrackLost || ctLost
	t.sum.NodeCPU += procsCPU(r.Procs) - cpuBefore
	t.sum.NodeRunqueueWait += procsRunqueueWait(r.Procs) - waitBefore
	t.sum.CentralCPU += procsCPU(central) - centralBefore
	t.sum.UpstreamQueries += e.upstream.queries.Load() - upBefore
	if genErr != nil {
		return genErr
	}
	t.loads = append(t.loads, res)
	var errs []error
	if txAfter, err := txPackets(ctx, n.Netns, NodeUplink); err == nil {
		t.sum.PacketsOut += txAfter - txBefore
	} else {
		errs = append(errs, err)
	}
	if apiAfter, err := scrapeRequests(ctx, r.APITier); err == nil {
		t.sum.APITierQueries += apiAfter - apiBefore
	} else {
		errs = append(errs, err)
	}
	live, err := conntrackEntries(ctx, n.Netns)
	t.sum.ConntrackLive = max(t.sum.ConntrackLive, live)
	errs = append(errs, err, r.alive())
	return errors.Join(errs...)
}

// scrapeRequests reads the total of coredns_dns_requests_total.
func scrapeRequests(ctx context.Context, t metricsTarget) (float64, error) {
	code, body, err := httpGet(ctx, t.Netns, t.URL)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	if code != 200 {
		return 0, fmt.Errorf("scrape %s: status %d", t.URL, code)
	}
	return metricSum(body, "coredns_dns_requests_total"), nil
}

// generate runs `nodedns-loadtest load` inside the node's pod namespace
// and returns its result. Progress lines go to w with a prefix (nil: none).
func (e *Env) generate(ctx context.Context, n *simNode, server string, cfg Config, d time.Duration, name string, w io.Writer) (*gen.Result, error) {
	jsonPath := filepath.Join(e.opts.OutDir, "load-"+name+".json")
	sources := n.PodIPs[0].String() + "-" + n.PodIPs[len(n.PodIPs)-1].String()
	if cfg.noisyPod {
		sources = n.NoisyIP.String()
	}
	args := []string{
		"load", "-server", server, "-rate", strconv.Itoa(cfg.Rate), "-duration", d.String(),
		"-pods", strconv.Itoa(cfg.Pods), "-mix", cfg.Mix, "-seed", strconv.FormatUint(cfg.Seed, 10),
		"-timeout", cfg.Timeout.String(), "-attempts", strconv.Itoa(cfg.Attempts),
		"-source-ips", sources,
		"-json", jsonPath,
	}
	if w == nil {
		args = append(args, "-quiet")
	}
	argv := append([]string{e.bin("nodedns-loadtest")}, args...)
	if cfg.GeneratorRealtime {
		argv = append([]string{"chrt", "--rr", "1"}, argv...)
	}
	cmd := n.Pod.Command(ctx, argv[0], argv[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var tail []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if w != nil {
			fmt.Fprintf(w, "   %-9s %s\n", name, sc.Text())
		}
		tail = append(tail, sc.Text())
		if len(tail) > 5 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("generator: %w: %s", err, strings.Join(tail, "\n"))
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, err
	}
	var res gen.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", jsonPath, err)
	}
	return &res, nil
}

func machine() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	load := ""
	if len(f) >= 3 {
		load = ", load average " + strings.Join(f[:3], " ") + " at start"
	}
	out, _ := os.ReadFile("/proc/cpuinfo")
	return fmt.Sprintf("%d CPUs%s", strings.Count(string(out), "\nprocessor")+1, load)
}
