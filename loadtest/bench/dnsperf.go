package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DnsperfResult is the statistics block dnsperf prints at the end of a run.
type DnsperfResult struct {
	Sent, Completed, Lost int64
	RunTime               time.Duration
	QPS                   float64
	AvgLatency            time.Duration
	Rcodes                map[string]int64 // "NOERROR" → count
}

// ParseDnsperf parses dnsperf 2.x output (its "Statistics:" block).
func ParseDnsperf(out []byte) (DnsperfResult, error) {
	r := DnsperfResult{Rcodes: map[string]int64{}}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		var err error
		switch key {
		case "Queries sent":
			r.Sent, err = strconv.ParseInt(f[0], 10, 64)
			seen++
		case "Queries completed":
			r.Completed, err = strconv.ParseInt(f[0], 10, 64)
			seen++
		case "Queries lost":
			r.Lost, err = strconv.ParseInt(f[0], 10, 64)
		case "Run time (s)":
			var s float64
			s, err = strconv.ParseFloat(f[0], 64)
			r.RunTime = time.Duration(s * float64(time.Second))
			seen++
		case "Queries per second":
			r.QPS, err = strconv.ParseFloat(f[0], 64)
			seen++
		case "Average Latency (s)":
			var s float64
			s, err = strconv.ParseFloat(f[0], 64)
			r.AvgLatency = time.Duration(s * float64(time.Second))
		case "Response codes":
			// "NOERROR 99 (99.00%), NXDOMAIN 1 (1.00%)"
			for _, part := range strings.Split(val, ",") {
				p := strings.Fields(part)
				if len(p) < 2 {
					continue
				}
				n, perr := strconv.ParseInt(p[1], 10, 64)
				if perr != nil {
					err = perr
					break
				}
				r.Rcodes[p[0]] = n
			}
		}
		if err != nil {
			return DnsperfResult{}, fmt.Errorf("parse dnsperf %q: %w", key, err)
		}
	}
	if seen != 4 {
		return DnsperfResult{}, errors.New("parse dnsperf: no complete statistics block (sent, completed, run time, qps)")
	}
	return r, nil
}

// dnsperf settings. One thread: the client has one CPU. Several sockets
// (clients) and many outstanding queries keep a single-threaded server
// busy without the client waiting on round trips.
const (
	dnsperfThreads     = 1
	dnsperfClients     = 4
	dnsperfOutstanding = 400
	dnsperfTimeout     = 2 // seconds until a query counts as lost
)

// dnsperfArgs is one dnsperf invocation.
type dnsperfArgs struct {
	sched       sched
	host        string
	port        int
	queryFile   string
	passes      int           // -n: passes over the file; 0: run for limit
	limit       time.Duration // -l
	outstanding int           // -q
	logPath     string        // dnsperf's output is saved here
}

// runDnsperf runs dnsperf and parses its statistics.
func runDnsperf(ctx context.Context, a dnsperfArgs) (DnsperfResult, error) {
	args := []string{"dnsperf",
		"-s", a.host, "-p", strconv.Itoa(a.port), "-d", a.queryFile,
		"-T", strconv.Itoa(dnsperfThreads), "-c", strconv.Itoa(dnsperfClients),
		"-q", strconv.Itoa(a.outstanding), "-t", strconv.Itoa(dnsperfTimeout),
	}
	if a.passes > 0 {
		args = append(args, "-n", strconv.Itoa(a.passes))
	} else {
		args = append(args, "-l", strconv.FormatFloat(a.limit.Seconds(), 'f', -1, 64))
	}
	args, err := a.sched.wrap(args)
	if err != nil {
		return DnsperfResult{}, err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if werr := os.WriteFile(a.logPath, out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return DnsperfResult{}, fmt.Errorf("dnsperf (%s): %w (output in %s)", strings.Join(args, " "), err, a.logPath)
	}
	r, err := ParseDnsperf(out)
	if err != nil {
		return DnsperfResult{}, fmt.Errorf("%w (output in %s)", err, a.logPath)
	}
	return r, nil
}

// lookPath finds prog in PATH, then in /usr/sbin and /sbin, where Debian
// puts unbound and dnsmasq but which a non-root PATH often lacks.
func lookPath(prog string) (string, error) {
	if p, err := exec.LookPath(prog); err == nil {
		return p, nil
	} else if strings.Contains(prog, "/") {
		return "", err
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not in PATH, /usr/sbin or /sbin", prog)
}
