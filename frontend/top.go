package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/httpserve"
)

// topHandler serves the top talkers (server.Talkers) as JSON on the
// metrics listener's /top; 404 with the reason when --top-talkers=0.
func topHandler(srv *server.Server) httpserve.Handler {
	return func(body *bytes.Buffer) (int, string) {
		t, err := srv.TopTalkers(0)
		if err != nil {
			body.WriteString(err.Error() + "\n")
			return http.StatusNotFound, "text/plain; charset=utf-8"
		}
		if err := json.NewEncoder(body).Encode(t); err != nil {
			return http.StatusInternalServerError, "text/plain; charset=utf-8"
		}
		return http.StatusOK, "application/json"
	}
}

// topConfig is the command line of `nodedns-frontend top`.
type topConfig struct {
	metrics string
	n       int
	timeout time.Duration
}

// newTopFlagSet registers the flags of `top`. README.md's TOP section is
// checked against it (readme_test.go).
func newTopFlagSet(cfg *topConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("nodedns-frontend top", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: nodedns-frontend top [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.metrics, "metrics", "127.0.0.1:9253", "`ADDR` of the frontend's --metrics listener (host:port), whose /top is read")
	fs.IntVar(&cfg.n, "n", 20, "rows shown, most queries first; 0 shows all")
	durationVar(fs, &cfg.timeout, "timeout", 5*time.Second, "how long to wait for the frontend")
	return fs
}

// topCmd prints the top talkers of a running frontend as a table.
func topCmd(args []string, stdout, stderr io.Writer) int {
	var cfg topConfig
	fs := newTopFlagSet(&cfg, io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "nodedns-frontend top: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 || cfg.n < 0 {
		fmt.Fprintf(stderr, "nodedns-frontend top: unexpected argument %q or negative -n\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if _, _, err := net.SplitHostPort(cfg.metrics); err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend top: --metrics %q: %v\n", cfg.metrics, err)
		return 2
	}
	t, err := fetchTop(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend top: %v\n", err)
		return 1
	}
	printTop(stdout, t, cfg.n)
	return 0
}

// fetchTop reads /top from the frontend.
func fetchTop(cfg topConfig) (server.Talkers, error) {
	var t server.Talkers
	c := &http.Client{Timeout: cfg.timeout}
	url := "http://" + cfg.metrics + "/top"
	resp, err := c.Get(url)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return t, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%s: %w", url, err)
	}
	return t, nil
}

// printTop writes the first n rows (all when n is 0) as a table.
func printTop(w io.Writer, t server.Talkers, n int) {
	fmt.Fprintf(w, "Queries per client address over the last %ds (%d sources tracked per socket at most; past that, \"other\").\n",
		t.WindowSeconds, t.MaxSources)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ADDRESS\tQUERIES\tNXDOMAIN\tSERVFAIL\tREFUSED\tOVERLOADED\t")
	rows := t.Talkers
	if n > 0 && len(rows) > n {
		rows = rows[:n]
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Addr, r.Queries,
			r.NXDomain, r.Servfail, r.Refused, r.Overloaded)
	}
	_ = tw.Flush()
	if len(rows) < len(t.Talkers) {
		fmt.Fprintf(w, "(%d more; -n=0 shows all)\n", len(t.Talkers)-len(rows))
	}
}
