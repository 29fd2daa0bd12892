package httpserve

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// testCounter is a Counter for tests.
type testCounter struct{ n atomic.Int64 }

func (c *testCounter) Inc() { c.n.Add(1) }

// testMetrics holds the counters of one server, by limit.
type testMetrics struct {
	evicted, refused [NumLimits]testCounter
}

func (m *testMetrics) evictedTotal() int64 {
	return m.evicted[PeerLimit].n.Load() + m.evicted[ListenerLimit].n.Load()
}

// startCounted is start with every counter of Metrics set.
func startCounted(t *testing.T, routes map[string]Handler) (*Server, *testMetrics) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tm := &testMetrics{}
	var m Metrics
	for l := range NumLimits {
		m.Evicted[l], m.Refused[l] = &tm.evicted[l], &tm.refused[l]
	}
	s := ServeCounted(l, routes, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, tm
}

// eventually waits up to a second for got to return want.
func eventually(t *testing.T, what string, got func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for got() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := got(); n != want {
		t.Errorf("%s: %d, want %d", what, n, want)
	}
}

// TestMetricsCountEvictionsAndRefusals: each eviction and refusal is
// counted once, under the limit that was reached.
func TestMetricsCountEvictionsAndRefusals(t *testing.T) {
	old := headTimeout
	headTimeout = 30 * time.Second // nothing may close for want of a head
	t.Cleanup(func() { headTimeout = old })
	s, m := startCounted(t, map[string]Handler{"/health": okHandler("OK\n")})
	count := func(c *testCounter) func() int64 { return c.n.Load }

	// A peer at its limit: its next connection evicts its oldest.
	for range maxConnsPerPeer {
		dialPending(t, s, "127.0.0.2")
	}
	dialPending(t, s, "127.0.0.2")
	eventually(t, "evicted at the peer limit", count(&m.evicted[PeerLimit]), 1)

	// The listener at its limit: 32 from each of .2-.5 fill the 128
	// slots; a connection from .6 evicts one of the peer holding the most.
	for _, p := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		for range maxConnsPerPeer {
			dialPending(t, s, p)
		}
	}
	eventually(t, "slots held", func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return int64(len(s.conns))
	}, maxConns)
	dialPending(t, s, "127.0.0.6")
	eventually(t, "evicted at the listener limit", count(&m.evicted[ListenerLimit]), 1)
	eventually(t, "evicted at the peer limit, after", count(&m.evicted[PeerLimit]), 1)
	eventually(t, "refused at the peer limit", count(&m.refused[PeerLimit]), 0)
	eventually(t, "refused at the listener limit", count(&m.refused[ListenerLimit]), 0)
}

// TestMetricsCountRefusals: a connection closed because every slot it
// could take is serving is counted as refused, not evicted.
func TestMetricsCountRefusals(t *testing.T) {
	release := make(chan struct{})
	s, m := startCounted(t, map[string]Handler{"/slow": func(*bytes.Buffer) (int, string) {
		<-release
		return 200, "text/plain"
	}})
	t.Cleanup(func() { close(release) })
	for range maxConnsPerPeer {
		c := dialFrom(t, s, "127.0.0.2")
		if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // every handler is running by now
	if c := dialPending(t, s, "127.0.0.2"); !closedSoon(c, 2*time.Second) {
		t.Fatalf("a connection over the limit with every slot serving stayed open")
	}
	eventually(t, "refused at the peer limit", m.refused[PeerLimit].n.Load, 1)
	eventually(t, "evicted", m.evictedTotal, 0)
}
