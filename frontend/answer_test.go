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
	// stallOnly, when set, limits the stall to names starting with
	// "stall": the others (and the pool's probes) are answered at once.
	stallOnly bool

	mu                      sync.Mutex
	accepted, shut, queries int // queries: those of the test's names, not the probes
}

func startStalledBackend(t *testing.T, half bool) *stalledBackend {
	return startStalled(t, &stalledBackend{half: half})
}

func startStalled(t *testing.T, b *stalledBackend) *stalledBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
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
		if b.stallOnly && len(m.Question) == 1 && !strings.HasPrefix(m.Question[0].Name, "stall") {
			r := new(dns.Msg).SetReply(&m)
			if m.Question[0].Qtype == dns.TypeA {
				r.Answer = append(r.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: m.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
					A:   net.IPv4(192, 0, 2, 1),
				})
			}
			out, err := r.Pack()
			if err != nil {
				return
			}
			if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
				return
			}
			continue
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

// timedAnswer is what a client got over network and how long it waited.
type timedAnswer struct {
	network string
	r       *dns.Msg
	took    time.Duration
	err     error
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
				res := make(chan timedAnswer, 3)
				q := dnstest.Query(fmt.Sprintf("hung-%s.example.org", network), dns.TypeA)
				for range 3 {
					go func() {
						r, took, err := timedExchange(network, l.DNS[0], q.Copy(), 10*time.Second)
						res <- timedAnswer{network, r, took, err}
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
	const perNet = 3
	res := make(chan timedAnswer, 2*perNet)
	sent := time.Now()
	for _, network := range []string{"udp", "tcp"} {
		for i := range perNet {
			go func() {
				q := dnstest.Query(fmt.Sprintf("sigterm-%s-%d.example.org", network, i), dns.TypeA)
				r, took, err := timedExchange(network, p.ready.DNS[0], q, 10*time.Second)
				res <- timedAnswer{network, r, took, err}
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

// TestStalledConnectionHoldsNoOtherQuery: while the backend stalls in the
// middle of the answer to one name, clients asking other names over other
// connections, UDP and TCP, are answered at once; the stalled name is
// answered SERVFAIL within the bound, the stalled connection is closed,
// and the next queries are answered over the connections left or a new
// one.
func TestStalledConnectionHoldsNoOtherQuery(t *testing.T) {
	b := startStalled(t, &stalledBackend{half: true, stallOnly: true})
	l := startRun(t, baseArgs(t, b.addr)...)
	stalled := make(chan timedAnswer, 1)
	go func() {
		r, took, err := timedExchange("tcp", l.DNS[0], dnstest.Query("stall.example.org", dns.TypeA), 10*time.Second)
		stalled <- timedAnswer{"tcp", r, took, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, _, n := b.counts(); n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled name never reached the backend")
		}
	}
	var slowest time.Duration
	for i := range 10 {
		for _, network := range []string{"udp", "tcp"} {
			r, took, err := timedExchange(network, l.DNS[0], dnstest.Query(fmt.Sprintf("other-%d-%s.example.org", i, network), dns.TypeA), 5*time.Second)
			slowest = max(slowest, took)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Errorf("other-%d over %s while a connection stalls: %s, %v; want the answer", i, network, rcodeOf(r), err)
			}
		}
	}
	t.Logf("20 misses of other names while the backend stalls mid-message on one: slowest answered in %v", slowest)
	if slowest > 500*time.Millisecond {
		t.Errorf("a miss of another name took %v while a connection stalled", slowest)
	}
	got := <-stalled
	t.Logf("stalled name: answer %s after %v, error %v", rcodeOf(got.r), got.took.Round(time.Millisecond), got.err)
	if got.err != nil || got.r.Rcode != dns.RcodeServerFailure || got.took > resolver.DefaultAnswerTimeout+time.Second {
		t.Errorf("stalled name: %s after %v (%v); want SERVFAIL within --answer-timeout", rcodeOf(got.r), got.took, got.err)
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, shut, _ := b.counts(); shut >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled connection was not closed")
		}
	}
	r, _, err := timedExchange("udp", l.DNS[0], dnstest.Query("after.example.org", dns.TypeA), 5*time.Second)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Errorf("after the stall: %s, %v", rcodeOf(r), err)
	}
	accepted, shut, _ := b.counts()
	t.Logf("backend connections: %d accepted, %d closed by the frontend", accepted, shut)
}
