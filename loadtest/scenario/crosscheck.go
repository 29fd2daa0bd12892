package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/loadtest/bench"
	"github.com/nodedns/nodedns/loadtest/gen"
)

// crosscheckDuration is the length of each of the two saturating runs.
const crosscheckDuration = 5 * time.Second

// Crosscheck compares the generator's closed-loop maximum with dnsperf's
// against the same nameserver, both from the pod namespace, with the
// same fully qualified names (one query per name: no search path): when
// both reach about the same rate the server is the limit, and a fixed
// rate far below the generator's maximum is not limited by the generator.
type Crosscheck struct {
	Design string `json:"design"`
	// DnsperfQPS and GeneratorQPS are queries per second answered.
	DnsperfQPS   float64 `json:"dnsperf_qps"`
	DnsperfLost  int64   `json:"dnsperf_lost"`
	GeneratorQPS float64 `json:"generator_qps"`
	// ComparisonQPS is the query rate the comparison's fixed load sent.
	ComparisonQPS float64 `json:"comparison_qps"`
	Command       string  `json:"dnsperf_command"`
	Error         string  `json:"error,omitempty"`
}

// crosscheck runs against nodedns when it was measured, else the last
// design that was.
func (e *Env) crosscheck(ctx context.Context, cfg Config, live []*trial, w io.Writer) (*Crosscheck, error) {
	var t *trial
	for _, c := range live {
		if c.err == nil && (t == nil || c.design.Name == "nodedns") {
			t = c
		}
	}
	if t == nil {
		return nil, fmt.Errorf("no design ran")
	}
	cc := &Crosscheck{Design: t.design.Name}
	if row := t.row(); row.Load != nil {
		cc.ComparisonQPS = row.Load.QueryRate()
	}
	// Service FQDNs the design has cached: both tools measure the server's
	// hit path, the most the generator must keep up with.
	var names []string
	var patterns []gen.Entry
	for _, ns := range []string{gen.BuiltinNamespace, gen.BuiltinOtherNamespace} {
		for i := range gen.BuiltinServices {
			n := fmt.Sprintf("svc-%d.%s.svc.cluster.local.", i, ns)
			names = append(names, n+" A", n+" AAAA")
			patterns = append(patterns, gen.Entry{Pattern: n, Weight: 1})
		}
	}
	dir := filepath.Join(e.opts.OutDir, "crosscheck")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	qfile := filepath.Join(dir, "queries.txt")
	if err := os.WriteFile(qfile, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	mixFile := filepath.Join(dir, "mix.txt")
	var mix strings.Builder
	for _, p := range patterns {
		mix.WriteString(p.Pattern + "\n")
	}
	if err := os.WriteFile(mixFile, []byte(mix.String()), 0o644); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(t.run.Nameserver, ":")
	args := []string{"-s", host, "-p", port, "-d", qfile, "-l", strconv.Itoa(int(crosscheckDuration.Seconds())), "-c", strconv.Itoa(cfg.Pods), "-q", "500"}
	cc.Command = "dnsperf " + strings.Join(args, " ")
	fmt.Fprintf(w, "== dnsperf cross-check against %s: %s\n", t.design.Name, cc.Command)
	out, err := t.node.Pod.Exec(ctx, "dnsperf", args...)
	if err != nil {
		return cc, err
	}
	dp, err := bench.ParseDnsperf([]byte(out))
	if err != nil {
		return cc, fmt.Errorf("dnsperf output: %w", err)
	}
	cc.DnsperfQPS, cc.DnsperfLost = dp.QPS, dp.Lost
	gc := cfg
	gc.Rate, gc.Mix = 0, "file:"+mixFile
	fmt.Fprintf(w, "== generator closed loop against %s, %d pods, the same names\n", t.design.Name, cfg.Pods)
	res, err := e.generateClosed(ctx, t, gc, crosscheckDuration)
	if err != nil {
		return cc, err
	}
	cc.GeneratorQPS = float64(res.Responses) / res.Elapsed.Seconds()
	return cc, nil
}

// generateClosed is generate in closed loop (rate 0).
func (e *Env) generateClosed(ctx context.Context, t *trial, cfg Config, d time.Duration) (*gen.Result, error) {
	return e.generate(ctx, t.node, t.run.Nameserver, cfg, d, t.design.Name+"-closed", nil)
}
