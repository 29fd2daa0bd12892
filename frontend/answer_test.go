package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/resolver"
	"github.com/nodedns/nodedns/shared/dnstest"
)

// stalledBackend is a fake backend that accepts connections and reads
// queries but never answers one whole: with half set it sends, for each
// query, a length prefix and half of the message it announces, then
// nothing more. It counts the connections accepted and those the
// frontend closed.
type stalledBackend struct {
	addr string
	half bool

	mu                      sync.Mutex
	accepted, shut, queries int // queries: those of the test's names, not the probes
}

func startStalledBackend(t *testing.T, half bool) *stalledBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stalledBackend{addr: ln.Addr().String(), half: half}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			b.mu.Lock()
			b.accepted++
			b.mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				b.serve(c)
				b.mu.Lock()
				b.shut++
				b.mu.Unlock()
			}()
		}
	}()
	return b
}

// serve reads queries until the peer closes the connection.
func (b *stalledBackend) serve(c net.Conn) {
	var hdr [2]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		var m dns.Msg
		if m.Unpack(body) == nil && len(m.Question) == 1 && strings.HasSuffix(m.Question[0].Name, ".example.org.") {
			b.mu.Lock()
			b.queries++
			b.mu.Unlock()
		}
		if b.half {
			// Announce 200 bytes, send 100 (the query's own header and
			// whatever follows it), then stall.
			out := make([]byte, 2+100)
			binary.BigEndian.PutUint16(out, 200)
			copy(out[2:], body)
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

func (b *stalledBackend) counts() (accepted, shut, queries int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted, b.shut, b.queries
}

// timedExchange sends q to addr over network and returns the answer (nil
// on silence) and how long the client waited, up to wait.
func timedExchange(network, addr string, q *dns.Msg, wait time.Duration) (*dns.Msg, time.Duration, error) {
	c := &dns.Client{Net: network, Timeout: wait}
	start := time.Now()
	r, _, err := c.Exchange(q, addr)
	return r, time.Since(start), err
}

// TestHungBackendMissAnswered: a miss whose backend accepted the query
// and never answers it, or sent half a message and stalled, is answered
// SERVFAIL before a stub resolver's first attempt gives up (glibc: 5s),
// over UDP and TCP, and so is every miss of the same name that joined it.
func TestHungBackendMissAnswered(t *testing.T) {
	for _, half := range []bool{false, true} {
		name := "silent"
		if half {
			name = "half-message"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := startStalledBackend(t, half)
			l := startRun(t, baseArgs(t, b.addr)...)
			for _, network := range []string{"udp", "tcp"} {
				// Three clients ask the same name at once: one exchange.
				type result struct {
					r    *dns.Msg
					took time.Duration
					err  error
				}
				res := make(chan result, 3)
				q := dnstest.Query(fmt.Sprintf("hung-%s.example.org", network), dns.TypeA)
				for range 3 {
					go func() {
						r, took, err := timedExchange(network, l.DNS[0], q.Copy(), 10*time.Second)
						res <- result{r, took, err}
					}()
				}
				for range 3 {
					got := <-res
					t.Logf("%s over %s: waited %v, answer %v, error %v", name, network, got.took.Round(time.Millisecond), rcodeOf(got.r), got.err)
					if got.err != nil || got.r == nil {
						t.Errorf("%s: no answer after %v (%v)", network, got.took, got.err)
						continue
					}
					if got.r.Rcode != dns.RcodeServerFailure {
						t.Errorf("%s: rcode %s, want SERVFAIL", network, dns.RcodeToString[got.r.Rcode])
					}
					if got.took > resolver.DefaultAnswerTimeout+time.Second {
						t.Errorf("%s: answered after %v, want within --answer-timeout (%v) and a second", network, got.took, resolver.DefaultAnswerTimeout)
					}
				}
			}
		})
	}
}

func rcodeOf(r *dns.Msg) string {
	if r == nil {
		return "none"
	}
	return dns.RcodeToString[r.Rcode]
}

// TestSIGTERMAnswersMissesOnHungBackend runs the binary against a backend
// that never answers and sends SIGTERM while misses over UDP and TCP wait
// for it: each miss is answered SERVFAIL within --answer-timeout, and the
// process exits cleanly within --shutdown-timeout of the signal.
func TestSIGTERMAnswersMissesOnHungBackend(t *testing.T) {
	b := startStalledBackend(t, false)
	const answerTimeout, shutdownTimeout = 2 * time.Second, 5 * time.Second
	p := startProc(t, append(baseArgs(t, b.addr), "--log-level=info",
		"--answer-timeout="+answerTimeout.String(), "--shutdown-timeout="+shutdownTimeout.String())...)
	type result struct {
		network string
		r       *dns.Msg
		took    time.Duration
		err     error
	}
	const perNet = 3
	res := make(chan result, 2*perNet)
	sent := time.Now()
	for _, network := range []string{"udp", "tcp"} {
		for i := range perNet {
			go func() {
				q := dnstest.Query(fmt.Sprintf("sigterm-%s-%d.example.org", network, i), dns.TypeA)
				r, took, err := timedExchange(network, p.ready.DNS[0], q, 10*time.Second)
				res <- result{network, r, took, err}
			}()
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, _, n := b.counts(); n == 2*perNet {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the misses never reached the backend")
		}
	}
	// SIGTERM while they wait on the hung backend.
	time.Sleep(200 * time.Millisecond)
	termAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range 2 * perNet {
		got := <-res
		t.Logf("%s miss waiting at SIGTERM: waited %v, answer %s, error %v", got.network, got.took.Round(time.Millisecond), rcodeOf(got.r), got.err)
		if got.err != nil || got.r == nil || got.r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: answer %s, error %v; want SERVFAIL", got.network, rcodeOf(got.r), got.err)
		}
		if got.took > answerTimeout+time.Second {
			t.Errorf("%s: answered after %v, want within --answer-timeout (%v)", got.network, got.took, answerTimeout)
		}
	}
	select {
	case <-p.exited:
		exit := time.Since(termAt)
		t.Logf("exited %v after SIGTERM (%v after the misses were sent): %v", exit.Round(time.Millisecond), time.Since(sent).Round(time.Millisecond), p.err)
		if p.err != nil {
			t.Errorf("exit: %v\n%s", p.err, p.logs())
		}
		if exit > shutdownTimeout {
			t.Errorf("exited %v after SIGTERM, want within --shutdown-timeout (%v)", exit, shutdownTimeout)
		}
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("no exit within %v of SIGTERM:\n%s", shutdownTimeout+5*time.Second, p.logs())
	}
	if !strings.Contains(p.logs(), `"stopped"`) {
		t.Errorf("log lacks the stop message:\n%s", p.logs())
	}
}
