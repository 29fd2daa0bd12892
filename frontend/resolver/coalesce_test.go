package resolver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// countingExchanger is a fakeExchanger that counts, as the upstream pool
// does, the misses the resolver coalesced (Coalescer).
type countingExchanger struct {
	fakeExchanger
	coalesced atomic.Int64
}

func (c *countingExchanger) CountCoalesced() { c.coalesced.Add(1) }

// bigAnswer returns records enough for an answer past 512 bytes, so that a
// UDP client without EDNS gets it truncated (RFC 1035 section 4.2.1) and a
// TCP client whole.
func bigAnswer() []string {
	var rrs []string
	for i := range 40 {
		rrs = append(rrs, fmt.Sprintf("x. 60 IN A 10.0.%d.%d", i/250, i%250+1))
	}
	return rrs
}

// TestCoalescedMissesShareOneEntry: n misses of one cache key at once cost
// one exchange and one entry, and each client gets it written for its own
// query: its ID, its question's case, its transport's size limit.
func TestCoalescedMissesShareOneEntry(t *testing.T) {
	const n = 20
	ex := &countingExchanger{}
	release := make(chan struct{})
	ex.set(hangUntil(release, records(t, dns.RcodeSuccess, bigAnswer()...)))
	r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})

	type answer struct {
		id    uint16
		tcp   bool
		name  string
		reply []byte
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		a := &answers[i]
		a.id, a.tcp = uint16(100+i), i%2 == 1
		a.name = "Coalesced.Example."
		if i%3 == 0 {
			a.name = "cOALESCED.example."
		}
		req := pack(t, a.name, dns.TypeA, func(m *dns.Msg) { m.Id = a.id })
		proto := server.UDP
		if a.tcp {
			proto = server.TCP
		}
		wg.Go(func() { a.reply = r.ServeSlow(context.Background(), buf(), req, proto) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for ex.coalesced.Load() < n-1 {
		if time.Now().After(deadline) {
			close(release)
			wg.Wait()
			t.Fatalf("%d of %d concurrent misses joined a running exchange; the backend got %d queries", ex.coalesced.Load(), n-1, ex.ncalls())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()

	if got := ex.ncalls(); got != 1 {
		t.Errorf("%d backend queries for %d identical misses, want 1", got, n)
	}
	for _, a := range answers {
		m := unpack(t, a.reply)
		if m.Id != a.id || len(m.Question) != 1 || m.Question[0].Name != a.name {
			t.Errorf("answer %d %q: got ID %d question %v", a.id, a.name, m.Id, m.Question)
		}
		switch {
		case m.Rcode != dns.RcodeSuccess:
			t.Errorf("answer %d: rcode %s", a.id, dns.RcodeToString[m.Rcode])
		case a.tcp && (m.Truncated || len(m.Answer) != 40):
			t.Errorf("TCP answer %d: TC %v, %d records, want the whole 40", a.id, m.Truncated, len(m.Answer))
		case !a.tcp && (!m.Truncated || len(a.reply) > 512):
			t.Errorf("UDP answer %d: TC %v, %d bytes, want truncated to 512", a.id, m.Truncated, len(a.reply))
		}
	}
	if _, ok := r.ServeFast(buf(), pack(t, "coalesced.example.", dns.TypeA, nil), server.TCP); !ok {
		t.Error("the shared answer was not cached")
	}
	if p, _ := r.Cache().Len(); p != 1 {
		t.Errorf("%d positive entries, want 1", p)
	}
}

// TestCoalescedFailureCountedPerMiss: when the shared exchange fails, every
// miss that waited for it is answered SERVFAIL and counted once in
// nodedns_upstream_errors_total, as when each had its own exchange.
func TestCoalescedFailureCountedPerMiss(t *testing.T) {
	const n = 5
	ex := &countingExchanger{}
	release := make(chan struct{})
	ex.set(hangUntil(release, func(*dns.Msg) (*dns.Msg, error) { return nil, errDown }))
	r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "down.example.", dns.TypeA, nil)
	replies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = r.ServeSlow(context.Background(), buf(), req, server.UDP) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for ex.coalesced.Load() < n-1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, b := range replies {
		if m := unpack(t, b); m.Rcode != dns.RcodeServerFailure {
			t.Errorf("reply %d: %s, want SERVFAIL", i, dns.RcodeToString[m.Rcode])
		}
	}
	if got := metricstest.Value(t, set, "nodedns_upstream_errors_total"); got != n {
		t.Errorf("nodedns_upstream_errors_total = %v, want %d", got, n)
	}
}

// TestFlightEndsAfterPanic: an exchange that panics, in the goroutine of
// its flight, neither ends the process nor leaves its waiter silent (it
// gets SERVFAIL), and still ends its flight, so that the next miss of the
// name is asked anew rather than waiting forever.
func TestFlightEndsAfterPanic(t *testing.T) {
	ex := &countingExchanger{}
	ex.set(func(*dns.Msg) (*dns.Msg, error) { panic("exchanger bug") })
	r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "panic.example.", dns.TypeA, nil)
	if m := unpack(t, r.ServeSlow(context.Background(), buf(), req, server.UDP)); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("answer to the miss whose exchange panicked: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.9"))
	done := make(chan []byte, 1)
	go func() { done <- r.ServeSlow(context.Background(), buf(), req, server.UDP) }()
	select {
	case out := <-done:
		if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Errorf("answer after the panic: %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the miss after a panicking exchange hangs")
	}
}
