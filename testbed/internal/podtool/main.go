// Command podtool is the one binary of the testbed's own container images:
// as /pause (argv[0] "pause") it is the pod sandbox image
// registry.k8s.io/pause:3.10 that containerd starts for every pod; as
// podtool it resolves names from inside a pod, through the pod's
// /etc/resolv.conf (the pure-Go resolver: search path and ndots as written
// there), and reports in its termination message.
//
//	podtool pause
//	podtool resolve -timeout 60s NAME=IP...   exit 0 once every NAME resolved to IP
//	podtool load -rate 100 -out FILE NAME=IP|NAME=* ...   lookups at a steady rate, counted per second
//	podtool load -unique ...   each lookup of NAME asks u<N>.NAME instead, a new name (a cache miss) each time
//	podtool flood -rate 1000 -for 10s DOMAIN   queries for new names under DOMAIN to the first nameserver, answers unread
//	podtool serve -http :80 -echo :7 -greeting TEXT   HTTP "<hostname> TEXT" on GET, TCP echo
//	podtool say -exit N WORDS...   print WORDS, exit with N
//
// serve and say are what `kubectl logs/exec/port-forward` and pods/proxy
// are tested against.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	cmd := filepath.Base(os.Args[0])
	if cmd != "pause" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: podtool pause | resolve [-timeout D] NAME=IP... | load ... | serve ... | say [-exit N] WORDS...")
			os.Exit(2)
		}
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "pause":
		pause()
	case "resolve":
		os.Exit(resolve(args))
	case "load":
		os.Exit(load(args))
	case "flood":
		os.Exit(flood(args))
	case "serve":
		os.Exit(serve(args))
	case "say":
		os.Exit(say(args))
	default:
		fmt.Fprintf(os.Stderr, "podtool: unknown command %q\n", cmd)
		os.Exit(2)
	}
}

// pause waits for SIGTERM or SIGINT, as the sandbox's PID 1 does.
func pause() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

// resolve looks up each NAME until it resolves to IP or the timeout ends,
// writes what it saw to the termination log, and returns the exit code.
func resolve(args []string) int {
	fs := flag.NewFlagSet("resolve", flag.ExitOnError)
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	delay := fs.Duration("delay", 0, "wait this long before the first lookup (a NetworkPolicy engine learns a new pod's IP from the API server)")
	_ = fs.Parse(args)
	time.Sleep(*delay)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r := &net.Resolver{PreferGo: true}
	var report []string
	code := 0
	for _, a := range fs.Args() {
		name, want, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "resolve: %q is not NAME=IP\n", a)
			return 2
		}
		start := time.Now()
		tries := 0
		var last string
		for {
			tries++
			qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
			addrs, err := r.LookupHost(qctx, name)
			qcancel()
			if err == nil && contains(addrs, want) {
				last = fmt.Sprintf("%s=%s ok after %d tries, %s", name, strings.Join(addrs, ","), tries, time.Since(start).Round(time.Millisecond))
				break
			}
			if err != nil {
				last = fmt.Sprintf("%s: %v", name, err)
			} else {
				last = fmt.Sprintf("%s=%s, want %s", name, strings.Join(addrs, ","), want)
			}
			if ctx.Err() != nil {
				last = fmt.Sprintf("FAIL %s after %d tries", last, tries)
				code = 1
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		fmt.Println(last)
		report = append(report, last)
	}
	// kubelet copies this file into the container's status (terminationMessagePath).
	_ = os.WriteFile("/dev/termination-log", []byte(strings.Join(report, "\n")), 0o644)
	return code
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// second counts the lookups started in one second of wall-clock time.
type second struct {
	sent, ok, failed, lost, slow int
	maxMs                        int64
}

// load starts lookups of the names in turn at -rate per second, each in its
// own goroutine (a lost query must not slow the rate), and appends one line
// per second to -out once every lookup of that second has ended:
//
//	<unix second> <sent> <ok> <failed> <lost> <slow> <max ms>
//
// ok: the answer holds the expected address ("*": any address); failed:
// an error or a wrong answer; lost: no answer within -timeout; slow: ok
// but slower than -slow.
func load(args []string) int {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	rate := fs.Int("rate", 100, "lookups per second")
	timeout := fs.Duration("timeout", 5*time.Second, "a lookup not answered within this is lost")
	slow := fs.Duration("slow", 100*time.Millisecond, "an answer slower than this is slow")
	out := fs.String("out", "/results/load.log", "file the per-second lines are appended to")
	unique := fs.Bool("unique", false, "ask u<N>.NAME, a new name each lookup, instead of NAME")
	_ = fs.Parse(args)
	type check struct{ name, want string }
	var checks []check
	for _, a := range fs.Args() {
		name, want, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "load: %q is not NAME=IP\n", a)
			return 2
		}
		checks = append(checks, check{name, want})
	}
	if len(checks) == 0 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "load: no names, or no rate")
		return 2
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		return 1
	}
	defer f.Close()

	var mu sync.Mutex
	secs := map[int64]*second{}
	inflight := map[int64]int{}
	// Nothing is written while mu is held, and the sending loop never
	// writes: a write the node's disk or the container log holds up must
	// not stop the lookups being measured.
	flush := func(all bool) {
		var b strings.Builder
		defer func() { _, _ = f.WriteString(b.String()) }()
		mu.Lock()
		defer mu.Unlock()
		now := time.Now().Unix()
		var keys []int64
		for k := range secs {
			if all || (k < now && inflight[k] == 0) {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, k := range keys {
			c := secs[k]
			fmt.Fprintf(&b, "%d %d %d %d %d %d %d\n", k, c.sent, c.ok, c.failed, c.lost, c.slow, c.maxMs)
			delete(secs, k)
			delete(inflight, k)
		}
	}
	r := &net.Resolver{PreferGo: true}
	one := func(c check, start time.Time) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		addrs, err := r.LookupHost(ctx, c.name)
		cancel()
		d := time.Since(start)
		k := start.Unix()
		var msg string
		defer func() {
			if msg != "" {
				fmt.Fprint(os.Stderr, msg)
			}
		}()
		mu.Lock()
		defer mu.Unlock()
		s := secs[k]
		inflight[k]--
		if ms := d.Milliseconds(); ms > s.maxMs {
			s.maxMs = ms
		}
		switch {
		case err != nil && (errors.Is(err, context.DeadlineExceeded) || d >= *timeout):
			s.lost++
			msg = fmt.Sprintf("%s lost %s after %s: %v\n", start.UTC().Format("15:04:05.000"), c.name, d.Round(time.Millisecond), err)
		case err != nil || !(c.want == "*" && len(addrs) > 0 || contains(addrs, c.want)):
			s.failed++
			msg = fmt.Sprintf("%s failed %s after %s: %v %v\n", start.UTC().Format("15:04:05.000"), c.name, d.Round(time.Millisecond), addrs, err)
		default:
			s.ok++
			if d > *slow {
				s.slow++
			}
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	flushTick := time.NewTicker(time.Second)
	defer flushTick.Stop()
	flushing := make(chan struct{})
	stopFlush := make(chan struct{})
	go func() {
		defer close(flushing)
		for {
			select {
			case <-stopFlush:
				return
			case <-flushTick.C:
				flush(false)
			}
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-sig:
			close(stopFlush)
			<-flushing
			flush(true)
			return 0
		case now := <-tick.C:
			c := checks[i%len(checks)]
			if *unique {
				c.name = fmt.Sprintf("u%d-%d.%s", os.Getpid(), i, c.name)
			}
			mu.Lock()
			k := now.Unix()
			if secs[k] == nil {
				secs[k] = &second{}
			}
			secs[k].sent++
			inflight[k]++
			mu.Unlock()
			go one(c, now)
		}
	}
}

// flood sends, over UDP to the first nameserver of /etc/resolv.conf, A
// queries for new names under DOMAIN (n<N>.DOMAIN) at -rate per second
// for -for, and reads no answer: a client that floods names of a domain
// whose servers hang, and does not care.
func flood(args []string) int {
	fs := flag.NewFlagSet("flood", flag.ExitOnError)
	rate := fs.Int("rate", 1000, "queries per second")
	dur := fs.Duration("for", 10*time.Second, "how long to send")
	_ = fs.Parse(args)
	if fs.NArg() != 1 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "flood: one DOMAIN, and a rate")
		return 2
	}
	domain := strings.TrimSuffix(fs.Arg(0), ".")
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		fmt.Fprintf(os.Stderr, "flood: %v\n", err)
		return 1
	}
	var server string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" && server == "" {
			server = net.JoinHostPort(f[1], "53")
		}
	}
	c, err := net.Dial("udp", server)
	if err != nil {
		fmt.Fprintf(os.Stderr, "flood: %v\n", err)
		return 1
	}
	defer c.Close()
	start := time.Now()
	sent := 0
	for time.Since(start) < *dur {
		for due := int(time.Since(start) * time.Duration(*rate) / time.Second); sent < due; sent++ {
			_, _ = c.Write(query(uint16(sent), fmt.Sprintf("n%d.%s", sent, domain)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("flood: sent %d queries for names under %s to %s in %s\n", sent, domain, server, time.Since(start).Round(time.Millisecond))
	_ = os.WriteFile("/dev/termination-log", []byte(fmt.Sprintf("sent %d", sent)), 0o644)
	return 0
}

// query is a DNS query (RFC 1035 section 4.1) for name's A record, RD set.
func query(id uint16, name string) []byte {
	b := []byte{byte(id >> 8), byte(id), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(name, ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1)
}
