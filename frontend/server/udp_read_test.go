package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestUDPReadWaitsAfterShortBatch: a reader that got fewer datagrams than
// it has slots waits for the poller at once, without the recvmmsg that
// would return EAGAIN. Queries sent one at a time, each after the answer
// to the one before, then cost one recvmmsg each (plus the first read and
// a few spurious wake-ups), not two.
func TestUDPReadWaitsAfterShortBatch(t *testing.T) {
	const queries = 200
	s, _ := startServer(t, Config{UDPSockets: 1}, &fakeHandler{})
	addr := s.Addrs()[0]
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 512)
	for i := range queries {
		m := new(dns.Msg)
		m.SetQuestion("hit.example.", dns.TypeA)
		m.Id = uint16(i)
		q, _ := m.Pack()
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	reads := 0
	for _, u := range s.udp {
		reads += u.reads
	}
	t.Logf("%d queries one at a time: %d recvmmsg calls", queries, reads)
	if reads > queries*5/4 {
		t.Errorf("%d recvmmsg calls for %d queries one at a time; want at most %d (one a query, and a few spurious wake-ups)", reads, queries, queries*5/4)
	}
}

// TestUDPNoQueryLeftQueued: one client sending each query once the answer
// to the one before has come gets every answer. A reader that skipped the
// read after a short batch in a new RawConn.Read (which clears the
// poller's ready mark) would leave a datagram queued behind the read
// until another one came, and with one client none would.
func TestUDPNoQueryLeftQueued(t *testing.T) {
	queries := 20000
	if testing.Short() {
		queries = 2000
	}
	s, _ := startServer(t, Config{UDPSockets: 1}, &fakeHandler{})
	c, err := net.Dial("udp", s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 512)
	m := new(dns.Msg)
	m.SetQuestion("hit.example.", dns.TypeA)
	q, _ := m.Pack()
	for i := range queries {
		q[0], q[1] = byte(i>>8), byte(i)
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("query %d of %d unanswered after 1s: %v", i, queries, err)
		}
	}
}
