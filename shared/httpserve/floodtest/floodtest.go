// Package floodtest holds connections open against an HTTP port, as a
// hostile neighbour would, for tests of the servers behind /health, /ready
// and /metrics.
package floodtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/proctest"
)

// Mode is what each flooding connection sends.
type Mode int

const (
	// Idle connections send nothing.
	Idle Mode = iota
	// Slowloris connections send a request head one byte at a time, one
	// byte every SlowlorisGap, and never finish it.
	Slowloris
)

// SlowlorisGap is the pause between two bytes of a Slowloris connection.
const SlowlorisGap = 100 * time.Millisecond

// Flood keeps a number of connections open to one address: each one that
// the server closes is dialled again at once, so the server faces the full
// number for as long as the flood runs.
type Flood struct {
	Dials atomic.Int64 // connections dialled so far
	Open  atomic.Int64 // connections open now

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start floods addr with n connections of mode, dialled from the local
// addresses in sources in turn (IP addresses; nil means the kernel's
// choice), and stops them at the end of the test. It returns once every
// connection has been dialled once.
func Start(t testing.TB, addr string, n int, sources []string, mode Mode) *Flood {
	t.Helper()
	NeedFiles(t, uint64(n)+512)
	ctx, cancel := context.WithCancel(context.Background())
	f := &Flood{cancel: cancel}
	t.Cleanup(f.Stop)
	var up sync.WaitGroup
	for i := range n {
		var d net.Dialer
		d.Timeout = 2 * time.Second
		if len(sources) > 0 {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(sources[i%len(sources)])}
		}
		up.Add(1)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.hold(ctx, &d, addr, mode, up.Done)
		}()
	}
	up.Wait()
	return f
}

// Stop closes the flood's connections and waits for its goroutines.
func (f *Flood) Stop() {
	f.cancel()
	f.wg.Wait()
}

// hold keeps one connection to addr open until ctx ends; first is called
// after the first dial.
func (f *Flood) hold(ctx context.Context, d *net.Dialer, addr string, mode Mode, first func()) {
	once := sync.OnceFunc(first)
	defer once()
	head := []byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		f.Dials.Add(1)
		once()
		if err != nil {
			// A refused or timed-out dial is retried after a pause, not
			// in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		f.Open.Add(1)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		switch mode {
		case Idle:
			io.Copy(io.Discard, c) // until the server closes
		case Slowloris:
			for i := 0; ctx.Err() == nil; i++ {
				b := byte('a')
				if i < len(head) {
					b = head[i]
				}
				if _, err := c.Write([]byte{b}); err != nil {
					break
				}
				c.SetReadDeadline(time.Now().Add(SlowlorisGap))
				if _, err := c.Read(make([]byte, 512)); err != nil && !isTimeout(err) {
					break // closed by the server (408, EOF, reset)
				}
			}
		}
		stop()
		c.Close()
		f.Open.Add(-1)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// NeedFiles raises the process's soft RLIMIT_NOFILE to at least n (within
// the hard limit, which root may raise too) and skips the test, saying
// why, when it cannot.
func NeedFiles(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("RLIMIT_NOFILE: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = n
	if lim.Max < n {
		lim.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("need %d open files for the flood, RLIMIT_NOFILE is lower and cannot be raised: %v", n, err)
	}
}

// Result is one probe's outcome.
type Result struct {
	Status  int           // HTTP status, 0 on error
	Err     error         // the client's error
	Elapsed time.Duration // from the start of the request to the end of the body
}

// Get fetches url once the way kubelet probes: a new connection, no
// keep-alive, the whole exchange within timeout.
func Get(url string, timeout time.Duration) Result {
	cl := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	begin := time.Now()
	resp, err := cl.Get(url)
	if err != nil {
		return Result{Err: err, Elapsed: time.Since(begin)}
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return Result{Err: fmt.Errorf("body: %w", err), Elapsed: time.Since(begin)}
	}
	return Result{Status: resp.StatusCode, Elapsed: time.Since(begin)}
}

// StartProcess runs the same flood as Start in a process of its own (a
// build of ./floodcmd), so that it competes with the server and the probes
// for the CPU as another process on the node would, not for this test's
// goroutine scheduler. The process runs at nice 19, the weight (15 against
// 1024) that a BestEffort pod's cgroup has beside nodedns's (cpu.shares 2
// against its requests): a neighbour floods the ports, it does not get the
// CPU of the pod it floods. It returns once every connection has been
// dialled, and kills the process at the end of the test.
func StartProcess(t testing.TB, addr string, n int, sources []string, mode Mode) {
	t.Helper()
	bin := floodBinary(t)
	m := "idle"
	if mode == Slowloris {
		m = "slowloris"
	}
	cmd := exec.Command(bin, addr, strconv.Itoa(n), m, strings.Join(sources, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	NeedFiles(t, uint64(n)+512) // inherited by the child
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 19); err != nil {
		t.Logf("flood process at nice 0: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "up\n" {
		t.Fatalf("flood process: %q, %v", line, err)
	}
}

// floodBinary builds floodcmd once per test process.
func floodBinary(t testing.TB) string {
	t.Helper()
	return proctest.Build(t, "github.com/nodedns/nodedns/shared/httpserve/floodtest/floodcmd", "floodcmd")
}

// KubeletFailureThreshold is how many probes in a row must fail before
// kubelet acts on them (failureThreshold: the chart's and kubelet's
// default, 3). A single probe that misses kubelet's 1 s timeout on a
// starved machine changes nothing; three in a row restart the container
// or take the pod out of its Services.
const KubeletFailureThreshold = 3

// Streaks counts, per URL, the failures in a row: what kubelet's
// failureThreshold is compared with.
type Streaks struct {
	cur, worst map[string]int
	failed     int
}

// Add records one probe of url.
func (s *Streaks) Add(url string, ok bool) {
	if s.cur == nil {
		s.cur, s.worst = map[string]int{}, map[string]int{}
	}
	if ok {
		s.cur[url] = 0
		return
	}
	s.failed++
	s.cur[url]++
	s.worst[url] = max(s.worst[url], s.cur[url])
}

// Failed is the number of failed probes.
func (s *Streaks) Failed() int { return s.failed }

// Longest returns the URL with the longest run of failures and its length.
func (s *Streaks) Longest() (string, int) {
	var url string
	n := 0
	for u, w := range s.worst {
		if w > n {
			url, n = u, w
		}
	}
	return url, n
}
