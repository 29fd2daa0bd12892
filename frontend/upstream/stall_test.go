package upstream

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// stallBackend answers every query with plainAnswer, except names under
// stall.: for those it writes the length prefix and half of the answer,
// then nothing, until the frontend closes the connection, whose close it
// reports on closed.
type stallBackend struct {
	addr     string
	accepted atomic.Int64
	closed   chan time.Duration // how long after the half answer each stalled connection was closed
}

func startStallBackend(t *testing.T) *stallBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stallBackend{addr: l.Addr().String(), closed: make(chan time.Duration, 10)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			b.accepted.Add(1)
			wg.Go(func() { b.serve(t, c) })
		}
	})
	return b
}

func (b *stallBackend) serve(t *testing.T, c net.Conn) {
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		buf := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		q := new(dns.Msg)
		if err := q.Unpack(buf); err != nil {
			t.Errorf("backend: unpack query: %v", err)
			return
		}
		out := frame(t, []*dns.Msg{plainAnswer(q)})
		if !strings.HasSuffix(q.Question[0].Name, "stall.") {
			if _, err := c.Write(out); err != nil {
				return
			}
			continue
		}
		if _, err := c.Write(out[:len(out)/2]); err != nil {
			return
		}
		stalled := time.Now()
		_, _ = io.Copy(io.Discard, c) // until the frontend closes it
		b.closed <- time.Since(stalled)
		return
	}
}

// TestStallMidMessage: a backend that sends the length prefix and half of
// an answer, then stalls, holds no query of another name (they go over
// other connections), and its connection is closed within
// messageRestTimeout, after which the query is answered by the fallback
// and the next one dials a new connection.
func TestStallMidMessage(t *testing.T) {
	b := startStallBackend(t)
	fb := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 2)})
	p, _ := newPool(t, Config{Backend: b.addr, Fallbacks: []string{fb.Addr}})

	type result struct {
		r    *dns.Msg
		err  error
		took time.Duration
	}
	stalled := make(chan result, 1)
	go func() {
		start := time.Now()
		r, err := p.Exchange(context.Background(), dnstest.Query("a.stall", dns.TypeA))
		stalled <- result{r, err, time.Since(start)}
	}()
	// While it stalls, other names are answered at once by the backend.
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			start := time.Now()
			r, err := p.Exchange(context.Background(), dnstest.Query(fmt.Sprintf("other-%d.example", i), dns.TypeA))
			took := time.Since(start)
			for s := slowest.Load(); int64(took) > s && !slowest.CompareAndSwap(s, int64(took)); s = slowest.Load() {
			}
			if err != nil || answeredBy(r) != "10.0.0.1" {
				t.Errorf("other-%d while a connection stalls: %v, %v; want the backend's answer", i, r, err)
			}
		})
	}
	wg.Wait()
	t.Logf("20 other names while a connection stalls: slowest answered in %v", time.Duration(slowest.Load()))
	if d := time.Duration(slowest.Load()); d > 500*time.Millisecond {
		t.Errorf("another name took %v while a connection stalled, want well under a second", d)
	}

	got := <-stalled
	t.Logf("stalled query: %v after the start, answered by %q, error %v", got.took.Round(time.Millisecond), answeredByOrNone(got.r), got.err)
	if got.err != nil || answeredBy(got.r) != "10.0.0.2" {
		t.Errorf("stalled query: %v, %v; want the fallback's answer", got.r, got.err)
	}
	if got.took < messageRestTimeout-100*time.Millisecond || got.took > messageRestTimeout+time.Second {
		t.Errorf("stalled query answered after %v, want about messageRestTimeout (%v)", got.took, messageRestTimeout)
	}
	select {
	case d := <-b.closed:
		t.Logf("stalled connection closed %v after the half answer", d.Round(time.Millisecond))
		if d > messageRestTimeout+500*time.Millisecond {
			t.Errorf("stalled connection closed after %v, want about messageRestTimeout (%v)", d, messageRestTimeout)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled connection was never closed")
	}

	// The connection is replaced: the next queries are answered over a
	// connection dialled anew or one that answered before.
	before := b.accepted.Load()
	for i := range 3 {
		if r := exchange(t, p, fmt.Sprintf("after-%d.example", i)); answeredBy(r) != "10.0.0.1" {
			t.Errorf("after the stall: answered by %q, want the backend", answeredBy(r))
		}
	}
	t.Logf("connections accepted by the backend: %d before the last queries, %d after", before, b.accepted.Load())
}

func answeredByOrNone(r *dns.Msg) string {
	if r == nil {
		return "none"
	}
	return answeredBy(r)
}
