// Command nodedns-loadtest measures nodedns against other per-node DNS
// designs.
//
//	nodedns-loadtest bench [flags]   side-by-side cache-hit benchmark
//	nodedns-loadtest load [flags]    load generator: many pods' stub resolvers
//	nodedns-loadtest compare [flags] the per-node DNS designs side by side on the testbed
//	nodedns-loadtest demo [flags]    nodedns on a testbed node, then the comparison (make demo)
//	nodedns-loadtest httpcost [flags] the HTTP endpoints' CPU and memory, two frontend binaries side by side
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nodedns/nodedns/loadtest/bench"
)

var version = "dev"

// commands maps a subcommand to its entry point. Each parses its own flags.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"bench":   runBench,
	"load":    runLoad,
	"compare": runCompare,
	"demo":    runDemo,
	// httpcost measures what serving /metrics, /health and /ready costs.
	"httpcost": runHTTPCost,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "nodedns-loadtest: %v\n", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "usage: nodedns-loadtest <command> [flags]  (version %s)\n\ncommands:\n  bench   side-by-side cache-hit benchmark (frontend, unbound, dnsmasq, CoreDNS as NodeLocal DNSCache)\n  load    load generator: many pods' stub resolvers (search path, A+AAAA, retries) against one nameserver\n  compare the per-node DNS designs side by side on the testbed (CoreDNS Deployment, NodeLocal DNSCache, dnsmasq+CoreDNS, nodedns)\n  demo    nodedns on a testbed node (answers, cache hits, no conntrack entry), then the comparison: what `make demo` runs\n  httpcost the HTTP endpoints' CPU per scrape and probe and RSS, two frontend binaries side by side\n\nRun `nodedns-loadtest <command> -h` for its flags.\n", version)
		if len(args) == 0 {
			return errors.New("no command")
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q (run without arguments for the list)", args[0])
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the saturating run and of the fixed-rate latency run, each")
	fs.IntVar(&cfg.Names, "names", cfg.Names, "distinct names in the query file of the saturating and latency runs (= cache entries after warm-up)")
	fs.IntVar(&cfg.RSSNames, "rss-names", cfg.RSSNames, "distinct names cached before the peak RSS is read")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "queries per second of the latency run")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "output dir: query file, configs, logs, dnsperf output, results.txt")
	servers := fs.String("servers", "all", "comma-separated servers to compare: frontend,unbound,dnsmasq,nodelocal or all")
	fs.BoolVar(&cfg.Pin, "pin", cfg.Pin, "pin servers to CPU 1 and dnsperf, latency generator and fake backend to CPU 0")
	fs.IntVar(&cfg.Nice, "nice", cfg.Nice, "niceness of servers, dnsperf and harness; -20 (as root) shields the measurement from other work on the machine")
	fs.BoolVar(&cfg.Realtime, "realtime", cfg.Realtime, "run the measured runs under SCHED_RR (as root) so other work on the machine delays neither server nor clients")
	fs.StringVar(&cfg.FrontendBin, "frontend", cfg.FrontendBin, "nodedns-frontend binary")
	fs.StringVar(&cfg.BaselineBin, "baseline", cfg.BaselineBin, "a second nodedns-frontend `binary` (say the previous commit's) measured beside -frontend in the same run")
	fs.StringVar(&cfg.CoreDNSBin, "coredns", cfg.CoreDNSBin, "CoreDNS binary run with NodeLocal DNSCache's Corefile")
	fs.BoolVar(&cfg.Profile, "profile", cfg.Profile, "record each server with perf during the saturating run (OUT/NAME.perf.txt; Go symbols need an unstripped binary)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Servers, err = bench.ParseServers(*servers); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rep, err := bench.Run(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(cfg.OutDir, "results.txt"))
	if err != nil {
		return err
	}
	if err := rep.WriteTable(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runHTTPCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultHTTPCostConfig()
	fs := flag.NewFlagSet("httpcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.FrontendBin, "frontend", cfg.FrontendBin, "nodedns-frontend binary")
	fs.StringVar(&cfg.BaselineBin, "baseline", cfg.BaselineBin, "a second nodedns-frontend `binary` (say the previous commit's) measured beside -frontend in the same run")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "times the two binaries take turns")
	fs.IntVar(&cfg.Requests, "requests", cfg.Requests, "scrapes, and again probes, per binary per round")
	fs.IntVar(&cfg.Flood, "flood", cfg.Flood, "idle connections held against each HTTP port at the end (0: none)")
	fs.DurationVar(&cfg.FloodFor, "flood-for", cfg.FloodFor, "how long the flood lasts")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "output dir: the frontends' logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("httpcost: unexpected arguments %q", fs.Args())
	}
	rows, err := bench.HTTPCost(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	return bench.WriteHTTPCost(stdout, cfg, rows)
}
