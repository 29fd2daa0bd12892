package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// tcpQueryFrom sends a query for name over a new TCP connection from src
// and returns the answer, or the error.
func tcpQueryFrom(t testing.TB, src, addr, name string) (*dns.Msg, error) {
	t.Helper()
	c, err := dialFrom(t, "tcp", src, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dc := &dns.Conn{Conn: c}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	if err := dc.WriteMsg(q); err != nil {
		return nil, err
	}
	r, err := dc.ReadMsg()
	if err == nil && r.Id != q.Id {
		err = fmt.Errorf("answer ID %d, want %d", r.Id, q.Id)
	}
	return r, err
}

// waitClosed reports whether the server closes c (a read returns EOF or
// a reset) within d; data read is discarded.
func waitClosed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestTCPHeldSlotsDoNotStarve: client A opens as many connections as the
// server allows (each past its share closes its own oldest idle one) and
// keeps them busy with zero-length messages; client B's
// TCP query (a retry after a truncated answer, say) is still answered
// within a second.
func TestTCPHeldSlotsDoNotStarve(t *testing.T) {
	s, set := startServer(t, Config{}, &fakeHandler{})
	addr := s.Addrs()[0]
	const tries = DefaultMaxTCPConns
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range tries {
		c, err := dialFrom(t, "tcp", "127.0.0.2", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(held)+1, err)
		}
		held = append(held, c)
	}
	waitFor(t, func() bool {
		return metricstest.Value(t, set, "nodedns_server_tcp_connections")+
			metricstest.Value(t, set, "nodedns_server_tcp_rejected_total")+
			metricstest.Value(t, set, "nodedns_server_tcp_evicted_total") == tries
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // zero-length messages on every connection, 10 a second
		defer wg.Done()
		for {
			for _, c := range held {
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				_, _ = c.Write([]byte{0, 0})
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	r, err := tcpQueryFrom(t, "127.0.0.3", addr, "hit.client.b.")
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("client B, while A holds %v connections: %v %v", metricstest.Value(t, set, "nodedns_server_tcp_connections"), r, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("client B answered after %v, want within 1s", d)
	}
	open := metricstest.Value(t, set, "nodedns_server_tcp_connections")
	t.Logf("A tried %d connections, %v stayed open; B answered in %v", tries, open, time.Since(start))
	if open > float64(s.cfg.MaxTCPConnsPerSource)+1 {
		t.Errorf("%v connections open, want A's share %d and B's", open, s.cfg.MaxTCPConnsPerSource)
	}
	// A's connections past its share closed its own idle ones, or were
	// refused: never another client's.
	if got := metricstest.Value(t, set, refusedSeries("tcp_conns_source")) +
		metricstest.Value(t, set, "nodedns_server_tcp_evicted_total"); got < tries-float64(s.cfg.MaxTCPConnsPerSource) {
		t.Errorf("refused tcp_conns_source + evicted = %v, want at least %d", got, tries-s.cfg.MaxTCPConnsPerSource)
	}
}

// TestTCPRuntsAreNotActivity: zero-length messages and messages shorter
// than a header do no work, so they do not hold a connection past its idle
// timeout.
func TestTCPRuntsAreNotActivity(t *testing.T) {
	s, _ := startServer(t, Config{TCPIdleTimeout: 300 * time.Millisecond}, &fakeHandler{})
	for _, runt := range [][]byte{{0, 0}, {0, 3, 1, 2, 3}} {
		t.Run(fmt.Sprintf("% x", runt), func(t *testing.T) {
			c, err := net.Dial("tcp", s.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for {
					if _, err := c.Write(runt); err != nil {
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			start := time.Now()
			if !waitClosed(c, 3*time.Second) {
				t.Fatal("connection kept open by runt messages for 3s, want it closed after its 300ms idle timeout")
			}
			t.Logf("closed after %v", time.Since(start))
		})
	}
}

// TestTCPOversizedQuery: a TCP message longer than maxTCPRequest is no
// query; the connection is closed without reading it, and counted. A
// query of exactly maxTCPRequest bytes is answered.
func TestTCPOversizedQuery(t *testing.T) {
	s, set := startServer(t, Config{}, &fakeHandler{})
	addr := s.Addrs()[0]
	for _, size := range []int{maxTCPRequest, maxTCPRequest + 1, 65535} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			q := new(dns.Msg).SetQuestion("hit.padded.", dns.TypeA)
			q.SetEdns0(1232, false)
			base, _ := q.Pack()
			q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, size-len(base)-4)})
			wire, _ := q.Pack()
			if len(wire) != size {
				t.Fatalf("built %d bytes, want %d", len(wire), size)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg := binary.BigEndian.AppendUint16(nil, uint16(size))
			_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write(append(msg, wire...)) // the server may close before it all is sent
			if size <= maxTCPRequest {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				r, err := (&dns.Conn{Conn: c}).ReadMsg()
				if err != nil || r.Id != q.Id {
					t.Fatalf("%d-byte query: %v %v, want an answer", size, r, err)
				}
				return
			}
			if !waitClosed(c, 2*time.Second) {
				t.Fatalf("%d-byte message: connection still open", size)
			}
		})
	}
	if got := metricstest.Value(t, set, "nodedns_server_dropped_total"); got != 2 {
		t.Errorf("dropped = %v, want 2", got)
	}
}

// TestTCPIdleShrinksWhenFull: when clients fill every connection slot
// and stay idle, the connections taken last get a shorter idle timeout,
// so a new client is answered within a couple of seconds instead of
// waiting out the full timeout (10s).
func TestTCPIdleShrinksWhenFull(t *testing.T) {
	const slots = 8
	s, set := startServer(t, Config{MaxTCPConns: slots}, &fakeHandler{})
	addr := s.Addrs()[0]
	for i := range slots {
		c, err := dialFrom(t, "tcp", fmt.Sprintf("127.0.0.%d", 2+i), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// One at a time, so that each sees how full the server is.
		waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_tcp_connections") == float64(i+1) })
	}
	start := time.Now()
	for {
		r, err := tcpQueryFrom(t, "127.0.0.100", addr, "hit.newcomer.")
		if err == nil && r.Rcode == dns.RcodeSuccess {
			t.Logf("a new client answered %v after %d idle clients took every slot", time.Since(start), slots)
			return
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("a new client still refused after %v while %d idle connections hold every slot: %v", time.Since(start), slots, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
