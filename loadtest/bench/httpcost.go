package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
)

// HTTPCostConfig is a run of HTTPCost: two nodedns-frontend binaries
// (say this commit's and the previous one's), each answering the same
// scrapes and probes in turn, in the same run.
type HTTPCostConfig struct {
	FrontendBin, BaselineBin string
	// Rounds alternates the binaries this many times, so that drift in
	// the machine's load falls on both alike.
	Rounds int
	// Requests is the scrapes, and again the probes, per binary per round.
	Requests int
	// Flood is the idle connections held against each HTTP port at the
	// end, re-dialled when closed, for FloodFor; 0: no flood.
	Flood    int
	FloodFor time.Duration
	OutDir   string // the frontends' logs
}

// DefaultHTTPCostConfig returns the run that docs cite.
func DefaultHTTPCostConfig() HTTPCostConfig {
	return HTTPCostConfig{
		FrontendBin: "bin/nodedns-frontend",
		Rounds:      5,
		Requests:    1000,
		Flood:       1000,
		FloodFor:    3 * time.Second,
		OutDir:      "out/httpcost",
	}
}

// HTTPCostRow is what one binary cost.
type HTTPCostRow struct {
	Name, Bin  string
	BinaryMiB  float64
	IdleRSS    uint64        // VmRSS once ready, before any request
	RSS        uint64        // VmRSS after the scrapes and probes
	FloodRSS   uint64        // VmRSS at the end of the flood
	PeakRSS    uint64        // VmHWM at the end
	PerScrape  time.Duration // CPU (user+system) per GET /metrics
	PerProbe   time.Duration // CPU per GET /health or /ready
	Failed     int           // scrapes and probes that got no 200
	FloodDials int64
}

// httpTarget is one frontend under measurement.
type httpTarget struct {
	row             HTTPCostRow
	p               *process
	metrics, health string // host:port
}

// HTTPCost measures, for each binary, the CPU each scrape and probe costs
// and the resident memory before, after, and under a flood of idle
// connections. Each request is a new connection without keep-alive, as
// the kubelet's probes are. log receives progress.
func HTTPCost(ctx context.Context, cfg HTTPCostConfig, log io.Writer) ([]HTTPCostRow, error) {
	if cfg.FrontendBin == "" || cfg.BaselineBin == "" {
		return nil, errors.New("httpcost: need both a frontend and a baseline binary")
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	be, err := StartBackend()
	if err != nil {
		return nil, err
	}
	defer be.Close()
	var targets []*httpTarget
	defer func() {
		for _, t := range targets {
			t.p.stop()
		}
	}()
	for _, nb := range [][2]string{{Frontend, cfg.FrontendBin}, {Baseline, cfg.BaselineBin}} {
		t, err := startHTTPTarget(ctx, nb[0], nb[1], be, cfg.OutDir)
		if t != nil {
			targets = append(targets, t)
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "httpcost: %s (pid %d) ready: metrics %s, health %s, idle RSS %.1f MiB\n", t.row.Name, t.p.pid(), t.metrics, t.health, mibOf(t.row.IdleRSS))
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	cpu := map[*httpTarget]*[2]time.Duration{}
	for _, t := range targets {
		cpu[t] = new([2]time.Duration)
	}
	for round := range cfg.Rounds {
		for _, t := range targets {
			urls := [][]string{
				{"http://" + t.metrics + "/metrics"},
				{"http://" + t.health + "/health", "http://" + t.health + "/ready"},
			}
			for kind, us := range urls {
				before, err := t.p.stat()
				if err != nil {
					return nil, err
				}
				for i := range cfg.Requests {
					if !get(ctx, client, us[i%len(us)]) {
						t.row.Failed++
					}
				}
				after, err := t.p.stat()
				if err != nil {
					return nil, err
				}
				cpu[t][kind] += after.CPU() - before.CPU()
			}
			if err := t.p.alive(); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(log, "httpcost: round %d of %d done\n", round+1, cfg.Rounds)
	}
	for _, t := range targets {
		n := time.Duration(cfg.Rounds * cfg.Requests)
		t.row.PerScrape, t.row.PerProbe = cpu[t][0]/n, cpu[t][1]/n
		st, err := t.p.status()
		if err != nil {
			return nil, err
		}
		t.row.RSS = st.VmRSS
	}
	for _, t := range targets {
		if cfg.Flood > 0 {
			t.row.FloodDials = idleFlood(ctx, []string{t.metrics, t.health}, cfg.Flood, cfg.FloodFor, func() {
				if st, err := t.p.status(); err == nil {
					t.row.FloodRSS = st.VmRSS
				}
			})
		}
		st, err := t.p.status()
		if err != nil {
			return nil, err
		}
		t.row.PeakRSS = st.VmHWM
	}
	rows := make([]HTTPCostRow, len(targets))
	for i, t := range targets {
		rows[i] = t.row
	}
	return rows, nil
}

// startHTTPTarget starts bin as name against the fake backend and waits
// until its /ready answers 200.
func startHTTPTarget(ctx context.Context, name, bin string, be *Backend, dir string) (*httpTarget, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return nil, fmt.Errorf("httpcost: %w", err)
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	t := &httpTarget{
		row:     HTTPCostRow{Name: name, Bin: bin, BinaryMiB: float64(fi.Size()) / (1 << 20)},
		metrics: "127.0.0.1:" + strconv.Itoa(ports[1]),
		health:  "127.0.0.1:" + strconv.Itoa(ports[2]),
	}
	argv := []string{bin, "--setup-network=false", "--listen=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--backend=" + be.Addr, "--backend-ready-url=" + be.ReadyURL, "--metrics=" + t.metrics, "--health=" + t.health}
	t.p, err = startProcess(name, argv, sched{cpu: -1}, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	deadline := time.Now().Add(20 * time.Second)
	for !get(ctx, client, "http://"+t.health+"/ready") {
		if err := t.p.alive(); err != nil {
			return t, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return t, fmt.Errorf("httpcost: %s not ready after 20s (log: %s)", name, t.p.log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := t.p.status()
	if err != nil {
		return t, err
	}
	t.row.IdleRSS = st.VmRSS
	return t, nil
}

// get fetches url and reports whether it answered 200.
func get(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == 200
}

// idleFlood holds n idle connections to each of addrs for d, re-dialling
// each one the server closes, calls sample at the end, and returns the
// connections dialled.
func idleFlood(ctx context.Context, addrs []string, n int, d time.Duration, sample func()) int64 {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var dials int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, addr := range addrs {
		for range n {
			wg.Go(func() {
				var dl net.Dialer
				for ctx.Err() == nil {
					c, err := dl.DialContext(ctx, "tcp", addr)
					mu.Lock()
					dials++
					mu.Unlock()
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					stop := context.AfterFunc(ctx, func() { c.Close() })
					io.Copy(io.Discard, c) // until the server or the end closes it
					stop()
					c.Close()
				}
			})
		}
	}
	<-ctx.Done()
	sample()
	wg.Wait()
	return dials
}

// WriteHTTPCost writes rows as a table.
func WriteHTTPCost(w io.Writer, cfg HTTPCostConfig, rows []HTTPCostRow) error {
	fmt.Fprintf(w, "HTTP cost: %d rounds x %d scrapes and %d probes per binary, new connection each; flood: %d idle connections per port for %v\n",
		cfg.Rounds, cfg.Requests, cfg.Requests, cfg.Flood, cfg.FloodFor)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tbinary MiB\tidle RSS MiB\tRSS after MiB\tRSS in flood MiB\tpeak RSS MiB\tCPU µs/scrape\tCPU µs/probe\tfailed\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%d\t\n", r.Name, r.BinaryMiB, mibOf(r.IdleRSS), mibOf(r.RSS),
			mibOf(r.FloodRSS), mibOf(r.PeakRSS), float64(r.PerScrape)/float64(time.Microsecond), float64(r.PerProbe)/float64(time.Microsecond), r.Failed)
	}
	return tw.Flush()
}

func mibOf(b uint64) float64 { return float64(b) / (1 << 20) }
