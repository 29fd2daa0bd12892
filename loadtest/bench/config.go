package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Server names, in the order the table lists them.
const (
	Frontend  = "frontend"  // bin/nodedns-frontend
	Unbound   = "unbound"   // Debian unbound, one thread, forwarding over TCP
	Dnsmasq   = "dnsmasq"   // Debian dnsmasq-base, forwarding over UDP
	NodeLocal = "nodelocal" // CoreDNS with NodeLocal DNSCache's cache and forward blocks
	// Baseline is a second nodedns-frontend binary (Config.BaselineBin),
	// say the previous commit's, run like Frontend in the same run so that
	// a change is measured side by side with what it replaces. It is in
	// the table only when BaselineBin is set.
	Baseline = "baseline"
)

// AllServers lists every server the bench knows, in table order.
var AllServers = []string{Frontend, Unbound, Dnsmasq, NodeLocal}

// tableOrder is the order of the table's rows: the baseline beside the
// frontend it is compared with.
var tableOrder = []string{Frontend, Baseline, Unbound, Dnsmasq, NodeLocal}

// Config controls one bench run. The zero value is not usable; start from
// DefaultConfig.
type Config struct {
	// Duration of the saturating dnsperf run and of the fixed-rate latency
	// run, each. Default 10s.
	Duration time.Duration
	// Names is the number of distinct names in the query file of the
	// saturating and latency runs, and so the number of cache entries
	// each server holds after the warm-up pass. The default, 5000, fits
	// every server's cache (dnsmasq holds 10,000 records, NodeLocal
	// DNSCache 9984 split over 256 shards), so those runs are all hits.
	Names int
	// RSSNames is the number of distinct names cached before the peak RSS
	// is read: after the latency run, a pass over this many names (the
	// query file's names and more) fills the caches further. Default
	// 10000, the size the RSS target is stated for.
	RSSNames int
	// Rate is the query rate of the latency run, in queries per second.
	// Default 20000.
	Rate int
	// OutDir receives the query file, server configs, logs, dnsperf output,
	// profiles and results.txt. Default out/bench.
	OutDir string
	// Servers to compare, in table order. Default AllServers.
	Servers []string
	// Pin puts every server on ServerCPU and dnsperf, the latency generator
	// and the fake backend (the harness itself) on ClientCPU. Default true.
	Pin bool
	// Nice is the niceness of the servers, dnsperf and the harness (the
	// latency generator and fake backend). On a machine shared with other
	// work, -20 keeps that work from dominating latency and throughput;
	// the CPU-seconds figures hold either way. Default 0: unchanged.
	Nice int
	// Realtime runs the measured runs (server, dnsperf, latency generator
	// and fake backend) under SCHED_RR, so that other work on the machine
	// cannot delay their wake-ups. Without it, on a busy machine, servers
	// that sleep between packets are never saturated and the percentiles
	// measure the other work. The kernel's real-time throttling still
	// leaves other work 5% of each CPU during the saturating runs.
	// Default false.
	Realtime bool
	// FrontendBin is the nodedns-frontend binary. Default bin/nodedns-frontend.
	FrontendBin string
	// BaselineBin, when set, is another nodedns-frontend binary measured
	// as the server Baseline in the same run. Default none.
	BaselineBin string
	// CoreDNSBin is the CoreDNS build run with NodeLocal DNSCache's Corefile.
	// Default bin/nodedns-backend.
	CoreDNSBin string
	// Profile records each server with perf during the saturating run
	// (NAME.perf.data and a flat report NAME.perf.txt in OutDir).
	// Default false.
	Profile bool
}

// CPUs the processes are pinned to when Config.Pin is set.
const (
	ClientCPU = 0
	ServerCPU = 1
)

// DefaultConfig returns the configuration `make bench` runs.
func DefaultConfig() Config {
	return Config{
		Duration:    10 * time.Second,
		Names:       5000,
		RSSNames:    10000,
		Rate:        20000,
		OutDir:      "out/bench",
		Servers:     slices.Clone(AllServers),
		Pin:         true,
		FrontendBin: "bin/nodedns-frontend",
		CoreDNSBin:  "bin/nodedns-backend",
	}
}

// ParseServers parses a comma-separated server list ("all" means AllServers)
// and returns it in table order.
func ParseServers(s string) ([]string, error) {
	if s == "" || s == "all" {
		return slices.Clone(AllServers), nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(AllServers, n) {
			return nil, fmt.Errorf("unknown server %q (known: %s)", n, strings.Join(AllServers, ","))
		}
		want[n] = true
	}
	var out []string
	for _, n := range AllServers {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// WithBaseline returns the server list with Baseline after Frontend (or
// first, without Frontend) when BaselineBin is set.
func (c Config) WithBaseline() []string {
	if c.BaselineBin == "" || slices.Contains(c.Servers, Baseline) {
		return c.Servers
	}
	var out []string
	for _, n := range tableOrder {
		if n == Baseline || slices.Contains(c.Servers, n) {
			out = append(out, n)
		}
	}
	return out
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Duration < time.Second:
		return fmt.Errorf("duration %s: must be at least 1s", c.Duration)
	case c.Names < 100:
		return fmt.Errorf("names %d: must be at least 100", c.Names)
	case c.RSSNames < c.Names:
		return fmt.Errorf("rss names %d: must be at least names (%d)", c.RSSNames, c.Names)
	case c.Rate < 100:
		return fmt.Errorf("rate %d: must be at least 100", c.Rate)
	case c.Nice < -20 || c.Nice > 19:
		return fmt.Errorf("nice %d: must be in -20..19", c.Nice)
	case c.OutDir == "":
		return errors.New("output dir: must not be empty")
	case len(c.Servers) == 0:
		return errors.New("servers: none selected")
	}
	for _, s := range c.Servers {
		if !slices.Contains(tableOrder, s) {
			return fmt.Errorf("unknown server %q", s)
		}
		if s == Baseline && c.BaselineBin == "" {
			return errors.New("server baseline: no baseline binary given")
		}
	}
	return nil
}
