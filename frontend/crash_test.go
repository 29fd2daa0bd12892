package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// startHolderProc runs `hold` in a process of its own until the test ends,
// with extra flags. It returns the holder's log so far.
func startHolderProc(t *testing.T, dir string, extra ...string) (logs func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"hold", "--holder-dir=" + dir, "--hold-timeout=30s"}, extra...)...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	up := make(chan struct{})
	var mu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "holding sockets for the frontend") {
				close(up)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("holder not up within 10s")
	}
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
}

// stubLoad is pods' stub resolvers at a fixed pace: each client sends a
// query, waits for its answer up to attemptTimeout and sends it again once
// (glibc's default is 2 attempts of 5s), then paces to the next.
type stubLoad struct {
	lookups, lost, slow atomic.Int64
	retried             atomic.Int64 // answered on the second attempt
	longest             atomic.Int64 // nanoseconds
	stop                chan struct{}
	wg                  sync.WaitGroup

	mu        sync.Mutex
	retriedAt []time.Time // when each lookup answered on its second attempt began
	slowAt    []time.Time // when each lookup answered after more than 1s began
}

// attemptTimeout is glibc's: a queued query the restarted frontend answers
// within it counts as answered on its first attempt, as it would for a
// pod. (3s made a loaded machine's slower restart look like a lost queue.)
const attemptTimeout = 5 * time.Second

func startStubLoad(t *testing.T, addr string, clients int, every time.Duration) *stubLoad {
	l := &stubLoad{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Go(func() {
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			buf := make([]byte, 512)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				// Half hits (one name per client, cached after its first
				// lookup), half misses (a new name each time).
				name := fmt.Sprintf("c%d.hit.example.", i)
				if n%2 == 1 {
					name = fmt.Sprintf("n%d.c%d.miss.example.", n, i)
				}
				q := dnstest.Query(name, dns.TypeA)
				q.Id = uint16(n)
				wire, _ := q.Pack()
				start := time.Now()
				l.lookups.Add(1)
				ok := false
				for attempt := 0; attempt < 2 && !ok; attempt++ {
					if _, err := c.Write(wire); err != nil {
						// Nothing bound answers ICMP unreachable: retry as
						// the next attempt would.
						time.Sleep(attemptTimeout)
						continue
					}
					_ = c.SetReadDeadline(time.Now().Add(attemptTimeout))
					for {
						m, err := c.Read(buf)
						if err != nil {
							break
						}
						if m >= 2 && uint16(buf[0])<<8|uint16(buf[1]) == q.Id {
							ok = true
							break
						}
					}
				}
				took := time.Since(start)
				if ok && took > attemptTimeout {
					l.retried.Add(1)
					l.mu.Lock()
					l.retriedAt = append(l.retriedAt, start)
					l.mu.Unlock()
				}
				if !ok {
					l.lost.Add(1)
					continue
				}
				if took > time.Second {
					l.slow.Add(1)
					l.mu.Lock()
					l.slowAt = append(l.slowAt, start)
					l.mu.Unlock()
				}
				for {
					cur := l.longest.Load()
					if int64(took) <= cur || l.longest.CompareAndSwap(cur, int64(took)) {
						break
					}
				}
			}
		})
	}
	return l
}

func (l *stubLoad) finish() { close(l.stop); l.wg.Wait() }

// between counts the times in ts after from and before to.
func between(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if t.After(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// TestSIGKILLLosesNoQuery runs the frontend binary with the holder beside
// it, SIGKILLs the frontend under load and starts it again a second later,
// as kubelet would: no lookup is lost, the queries of the gap wait in the
// held sockets and are answered by the new instance.
func TestSIGKILLLosesNoQuery(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	holderDir := t.TempDir()
	startHolderProc(t, holderDir)
	// A fixed port, as on a node: the restarted instance binds it afresh
	// if it gets no socket from the holder.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	args := append(baseArgs(t, b.Addr), "--listen="+addr, "--log-level=info", "--holder-dir="+holderDir)
	first := startProc(t, args...)
	// Let the frontend supply the holder before the load starts.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(first.logs(), "the holder keeps this instance's sockets") {
		if time.Now().After(deadline) {
			t.Fatalf("the holder was not supplied:\n%s", first.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 50 clients every 100ms: 500 lookups/s.
	ld := startStubLoad(t, addr, 50, 100*time.Millisecond)
	time.Sleep(2 * time.Second)
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// Queries sent once the process is known dead reach no reader until
	// the restart: the held sockets must keep them, so that each is
	// answered on its first attempt. (A query sent between the kill and
	// the death may be read by the dying process and lost with it: the
	// load's retries there are a stub resolver's ordinary second try.)
	dead := time.Now()
	gap := probeGap(t, addr, 20, 40*time.Millisecond)
	time.Sleep(time.Second)
	second := startProc(t, args...)
	ready := time.Now()
	if got := second.ready.DNS[0]; got != addr {
		t.Fatalf("restarted frontend serves %s, want the held %s:\n%s", got, addr, second.logs())
	}
	if !strings.Contains(second.logs(), "taking back the sockets") {
		t.Errorf("restarted frontend did not take the held sockets:\n%s", second.logs())
	}
	time.Sleep(3 * time.Second)
	ld.finish()
	t.Logf("%d lookups at 500/s across a SIGKILL and a restart 1s later: %d lost, %d slow (>1s), %d answered only on their second attempt, longest wait %v",
		ld.lookups.Load(), ld.lost.Load(), ld.slow.Load(), ld.retried.Load(), time.Duration(ld.longest.Load()).Round(time.Millisecond))
	if ld.lost.Load() != 0 {
		t.Errorf("%d of %d lookups lost", ld.lost.Load(), ld.lookups.Load())
	}
	if ld.slow.Load() == 0 {
		t.Error("no lookup waited over 1s: the load did not span the gap, so the test proves nothing")
	}
	answered, sent := gap()
	t.Logf("restart ready %v after the death; %d of %d queries sent in the gap answered on their first attempt",
		ready.Sub(dead).Round(time.Millisecond), answered, sent)
	if sent == 0 || answered != sent {
		t.Errorf("%d of %d queries sent while no frontend ran were answered on their first attempt (%v): the held sockets did not keep the gap's queries", answered, sent, attemptTimeout)
	}
}

// probeGap sends n single-attempt lookups, one every every, each from its
// own socket and waiting up to attemptTimeout; the function it returns
// waits for them and counts those answered and those sent.
func probeGap(t *testing.T, addr string, n int, every time.Duration) func() (answered, sent int) {
	var wg sync.WaitGroup
	var ok, tried atomic.Int64
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * every)
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			q := dnstest.Query(fmt.Sprintf("gap%d.miss.example.", i), dns.TypeA)
			q.Id = uint16(1000 + i)
			wire, _ := q.Pack()
			tried.Add(1)
			if _, err := c.Write(wire); err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(attemptTimeout))
			buf := make([]byte, 512)
			for {
				m, err := c.Read(buf)
				if err != nil {
					return
				}
				if m >= 2 && uint16(buf[0])<<8|uint16(buf[1]) == q.Id {
					ok.Add(1)
					return
				}
			}
		})
	}
	return func() (int, int) { wg.Wait(); return int(ok.Load()), int(tried.Load()) }
}

// TestSIGKILLRelays runs the frontend binary with a holder relaying to the
// test's backend (standing in for the fallback Service), SIGKILLs the
// frontend under load and starts it again only 4s later, as a
// CrashLoopBackOff would: no lookup is lost, those of the gap are answered
// through the relay, and the restarted frontend takes the sockets back.
func TestSIGKILLRelays(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	holderDir := t.TempDir()
	holderLogs := startHolderProc(t, holderDir, "--relay="+b.Addr, "--relay-after=500ms")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	args := append(baseArgs(t, b.Addr), "--listen="+addr, "--log-level=info", "--holder-dir="+holderDir)
	first := startProc(t, args...)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(first.logs(), "the holder keeps this instance's sockets") {
		if time.Now().After(deadline) {
			t.Fatalf("the holder was not supplied:\n%s", first.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 20 clients every 100ms: 200 lookups/s.
	ld := startStubLoad(t, addr, 20, 100*time.Millisecond)
	time.Sleep(time.Second)
	before := ld.lookups.Load()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// From its death on: until then the process may read queries it
	// never answers.
	killed := time.Now()
	time.Sleep(4 * time.Second)
	gap := ld.lookups.Load()
	second := startProc(t, args...)
	if !strings.Contains(second.logs(), "taking back the sockets") {
		t.Errorf("restarted frontend did not take the held sockets:\n%s", second.logs())
	}
	time.Sleep(2 * time.Second)
	ld.finish()
	logs := holderLogs()
	t.Logf("%d lookups at 200/s across a SIGKILL and a restart 4s later: %d lost, %d slow (>1s), %d answered only on their second attempt, longest wait %v",
		ld.lookups.Load(), ld.lost.Load(), ld.slow.Load(), ld.retried.Load(), time.Duration(ld.longest.Load()).Round(time.Millisecond))
	// A query the killed process had read and not answered needs its
	// second attempt (at most one per client); one begun after the kill
	// must not.
	ld.mu.Lock()
	retriedAfter := between(ld.retriedAt, killed, time.Now())
	slowAfter := between(ld.slowAt, killed, time.Now())
	ld.mu.Unlock()
	// Held only, every lookup of the gap but its last second would wait
	// over 1s for the restart; relayed, they wait --relay-after at most.
	inGap := int(gap - before)
	t.Logf("%d lookups in the 4s gap, %d of those begun after the kill waited over 1s", inGap, slowAfter)
	if slowAfter > inGap/10 {
		t.Errorf("%d of the %d lookups of the gap waited over 1s: not relayed", slowAfter, inGap)
	}
	if ld.lost.Load() != 0 || retriedAfter != 0 {
		t.Errorf("%d of %d lookups lost, %d begun after the kill retried: the relay should answer the gap", ld.lost.Load(), ld.lookups.Load(), retriedAfter)
	}
	if gap < 100 {
		t.Errorf("only %d lookups by the restart: the load did not span the gap", gap)
	}
	for _, want := range []string{"answering the held sockets through the relay", "stopped relaying"} {
		if !strings.Contains(logs, want) {
			t.Errorf("holder log lacks %q:\n%s", want, logs)
		}
	}
}
