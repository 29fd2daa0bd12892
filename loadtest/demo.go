package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodedns/nodedns/loadtest/scenario"
)

// runDemo is `nodedns-loadtest demo`, what `make demo` runs.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := scenario.DefaultConfig()
	// Short runs: the demo finishes in a few minutes.
	cfg.Rate, cfg.Duration, cfg.Rounds, cfg.Warmup, cfg.OutDir = 300, 12*time.Second, 2, 3*time.Second, "out/demo"
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	designs, nice := compareFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected arguments %q", fs.Args())
	}
	if err := prepare(&cfg, *designs, *nice, stderr, "demo"); err != nil {
		return err
	}
	start := time.Now()
	rep, path, err := runDesigns(ctx, cfg, stdout, "nodedns-loadtest demo "+strings.Join(args, " "), scenario.Demo)
	if rep != nil && path == "" {
		return err // the report could not be written: no summary
	}
	if rep != nil {
		fmt.Fprintln(stdout)
		rep.WriteTable(stdout)
		fmt.Fprintf(stdout, "\nreport: %s (JSON: results.json beside it; logs in %s)\n", path, cfg.OutDir)
	}
	fmt.Fprintf(stdout, "demo took %v; every process and namespace it started is gone\n", time.Since(start).Round(time.Second))
	return err
}
