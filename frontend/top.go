package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/httpserve"
)

// topHandler serves the top talkers (server.Talkers) on the metrics
// listener: as JSON on /top, as the table `nodedns-frontend top` prints
// on /top.txt; 404 with the reason when --top-talkers=0.
func topHandler(srv *server.Server, table bool) httpserve.Handler {
	return func(body *bytes.Buffer) (int, string) {
		t, err := srv.TopTalkers(0)
		if err != nil {
			body.WriteString(err.Error() + "\n")
			return 404, "text/plain; charset=utf-8"
		}
		if table {
			printTop(body, t)
			return 200, "text/plain; charset=utf-8"
		}
		if err := json.NewEncoder(body).Encode(t); err != nil {
			return 500, "text/plain; charset=utf-8"
		}
		return 200, "application/json"
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
	table, err := fetchTop(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend top: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, headLines(table, cfg.n))
	return 0
}

// fetchTop reads /top.txt from the frontend with a plain HTTP/1.0 GET:
// the binary links no HTTP client (net/http's would add about 3 MB to
// every node's frontend for this one request).
func fetchTop(cfg topConfig) (string, error) {
	url := "http://" + cfg.metrics + "/top.txt"
	c, err := net.DialTimeout("tcp", cfg.metrics, cfg.timeout)
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(cfg.timeout))
	if _, err := fmt.Fprintf(c, "GET /top.txt HTTP/1.0\r\nHost: %s\r\n\r\n", cfg.metrics); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	b, err := io.ReadAll(io.LimitReader(c, 64<<20))
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	head, body, ok := strings.Cut(string(b), "\r\n\r\n")
	status, _, _ := strings.Cut(head, "\r\n")
	if !ok || !strings.HasPrefix(status, "HTTP/1.") {
		return "", fmt.Errorf("%s: not an HTTP response: %.80q", url, b)
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] != "200" {
		return "", fmt.Errorf("%s: %s: %s", url, status, strings.TrimSpace(body))
	}
	return body, nil
}

// printTop writes the talkers as a table: a line saying what it counts,
// the header, a row per address.
func printTop(w io.Writer, t server.Talkers) {
	fmt.Fprintf(w, "Queries per client address over the last %ds (at most %d addresses tracked per socket; past that, \"other\").\n",
		t.WindowSeconds, t.MaxSources)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ADDRESS\tQUERIES\tNXDOMAIN\tSERVFAIL\tREFUSED\tOVERLOADED\t")
	for _, r := range t.Talkers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Addr, r.Queries, r.NXDomain, r.Servfail, r.Refused, r.Overloaded)
	}
	_ = tw.Flush()
}

// headLines returns the first n rows of the table (its two heading lines
// and n more), and a note of how many were left out; all when n is 0.
func headLines(table string, n int) string {
	lines := strings.SplitAfter(table, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if n <= 0 || len(lines) <= n+2 {
		return strings.Join(lines, "")
	}
	return strings.Join(lines[:n+2], "") + fmt.Sprintf("(%d more; -n=0 shows all)\n", len(lines)-n-2)
}
