package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nodedns/nodedns/loadtest/scenario"
)

// errUnavailable makes main exit 2 after printing what the machine lacks.
var errUnavailable = errors.New("cannot run here")

// compareFlags registers the comparison's flags on fs.
func compareFlags(fs *flag.FlagSet, cfg *scenario.Config) (designs *string, nice *int) {
	designs = fs.String("designs", "all", "designs to compare, comma-separated: coredns,nodelocal,zalando,coredns-ds-local,coredns-ds-prefer,nodedns or all")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "lookups per second of every design's measured run")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured load per design, split into -rounds runs")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds: the designs take turns, each running duration/rounds per round")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured run at the same rate before each measured one")
	fs.IntVar(&cfg.Pods, "pods", cfg.Pods, "pod addresses the lookups come from")
	fs.StringVar(&cfg.Mix, "mix", cfg.Mix, "generator mix (see `load -h`)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "pods' resolver timeout")
	fs.IntVar(&cfg.Attempts, "attempts", cfg.Attempts, "pods' resolver attempts")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the names (the same for every design)")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "output dir: report.md, results.json, logs")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "dir of nodedns-frontend, nodedns-backend, nodedns-loadtest")
	fs.BoolVar(&cfg.Dnsperf, "dnsperf", cfg.Dnsperf, "cross-check the generator's maximum with dnsperf against nodedns")
	fs.BoolVar(&cfg.Chaos, "chaos", cfg.Chaos, "run the chaos experiments after the comparison")
	fs.DurationVar(&cfg.ChaosDuration, "chaos-duration", cfg.ChaosDuration, "length of each chaos run")
	fs.StringVar(&cfg.ChaosOnly, "chaos-only", "", "run only the chaos experiments whose name contains this (flood, SIGKILL, upgrade, ...)")
	fs.BoolVar(&cfg.GeneratorRealtime, "generator-realtime", os.Geteuid() == 0, "run the load generator of the measured lookups under SCHED_RR (chrt), so that no design's processes or other work make it begin lookups late (root; every design alike; a chaos flood runs as an ordinary process)")
	nice = fs.Int("nice", -20, "niceness of the harness and all it starts (every design alike); 0 leaves it")
	return designs, nice
}

// prepare sets cfg.Designs from the -designs list, validates cfg, checks
// that the comparison can run and raises its priority.
func prepare(cfg *scenario.Config, designs string, nice int, stderr io.Writer, cmd string) error {
	var err error
	if cfg.Designs, err = scenario.ParseDesigns(designs); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if r := scenario.Unavailable(cfg.BinDir); r != "" {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, r)
		return errUnavailable
	}
	if nice != 0 {
		if err := scenario.SetNice(nice); err != nil {
			return err
		}
	}
	return nil
}

// runDesigns starts the environment, runs fn in it with its progress going
// to w, closes the environment and writes fn's report, a partial one too,
// into cfg.OutDir. It returns the report with the path of report.md, or,
// when the report could not be written, with an empty path.
func runDesigns(ctx context.Context, cfg scenario.Config, w io.Writer, command string,
	fn func(context.Context, *scenario.Env, scenario.Config, io.Writer) (*scenario.Report, error),
) (*scenario.Report, string, error) {
	env, err := scenario.StartEnv(ctx, scenario.Options{OutDir: cfg.OutDir, BinDir: cfg.BinDir, Pods: cfg.Pods, Logf: logf(w)})
	if err != nil {
		return nil, "", err
	}
	rep, runErr := fn(ctx, env, cfg, w)
	closeErr := env.Close()
	if rep == nil {
		return nil, "", errors.Join(runErr, closeErr)
	}
	rep.Command = command
	path, err := rep.WriteFiles(cfg.OutDir)
	if err != nil {
		return rep, "", errors.Join(runErr, closeErr, err)
	}
	return rep, path, errors.Join(runErr, closeErr)
}

// runCompare is `nodedns-loadtest compare`.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := scenario.DefaultConfig()
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	designs, nice := compareFlags(fs, &cfg)
	from := fs.String("from", "", "write report.md and the plots again from this results.json into -out, without running anything")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("compare: unexpected arguments %q", fs.Args())
	}
	if *from != "" {
		rep, err := scenario.ReadReport(*from)
		if err != nil {
			return err
		}
		path, err := rep.WriteFiles(cfg.OutDir)
		if err != nil {
			return err
		}
		rep.WriteTable(stdout)
		fmt.Fprintf(stdout, "\nreport: %s\n", path)
		fmt.Fprintf(stdout, "designs: %s\n", strings.Join(rep.DesignsRun(), ", "))
		return nil
	}
	if err := prepare(&cfg, *designs, *nice, stderr, "compare"); err != nil {
		return err
	}
	rep, path, err := runDesigns(ctx, cfg, stderr, "nodedns-loadtest compare "+strings.Join(args, " "), scenario.Compare)
	if path != "" {
		rep.WriteTable(stdout)
		fmt.Fprintf(stdout, "\nreport: %s\n", path)
	}
	if rep != nil {
		fmt.Fprintf(stdout, "designs: %s\n", strings.Join(rep.DesignsRun(), ", "))
	}
	return err
}

func logf(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(w, "-- "+format+"\n", args...)
	}
}
