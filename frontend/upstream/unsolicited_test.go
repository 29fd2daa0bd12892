package upstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// strayBackend is a TCP DNS server (RFC 1035 section 4.2.2 framing) that
// answers each query with an A record and lets a test put extra messages
// on a connection. It counts the connections it accepted.
type strayBackend struct {
	addr     string
	accepted atomic.Int64
	// reply returns what to write on connection conn (1 for the first)
	// for its n-th query (1 for the first): messages written in one Write,
	// then, after a pause, later ones. nil takes the plain answer.
	reply func(conn, n int, q *dns.Msg) (now, later []*dns.Msg)
}

func startStrayBackend(t *testing.T, reply func(conn, n int, q *dns.Msg) (now, later []*dns.Msg)) *strayBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &strayBackend{addr: l.Addr().String(), reply: reply}
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			id := int(b.accepted.Add(1))
			wg.Add(1)
			go func() { defer wg.Done(); b.serve(t, c, id) }()
		}
	}()
	return b
}

func plainAnswer(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetReply(q)
	m.Answer = append(m.Answer, &dns.A{
		Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
		A:   net.IPv4(10, 0, 0, 1),
	})
	return m
}

func (b *strayBackend) serve(t *testing.T, c net.Conn, conn int) {
	r := bufio.NewReader(c)
	for n := 1; ; n++ {
		var hdr [2]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		buf := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		q := new(dns.Msg)
		if err := q.Unpack(buf); err != nil {
			t.Errorf("backend: unpack query: %v", err)
			return
		}
		now, later := b.reply(conn, n, q)
		if now == nil && later == nil {
			now = []*dns.Msg{plainAnswer(q)}
		}
		if _, err := c.Write(frame(t, now)); err != nil {
			return
		}
		if len(later) > 0 {
			time.Sleep(20 * time.Millisecond)
			if _, err := c.Write(frame(t, later)); err != nil {
				return
			}
		}
	}
}

// frame packs msgs, each behind its length, into one buffer.
func frame(t *testing.T, msgs []*dns.Msg) []byte {
	var out []byte
	for _, m := range msgs {
		w, err := m.Pack()
		if err != nil {
			t.Errorf("backend: pack: %v", err)
			return nil
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(w)))
		out = append(out, w...)
	}
	return out
}

// zoneTail is what a zone transfer streams after its first message (RFC
// 5936 section 2.2): another message with the same ID, answering the
// transfer's question, not the next query's.
func zoneTail(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetReply(q)
	m.Answer = append(m.Answer, &dns.SOA{
		Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 30},
		Ns:  "ns.example.", Mbox: "admin.example.", Serial: 1, Refresh: 60, Retry: 60, Expire: 60, Minttl: 60,
	})
	return m
}

// TestUnsolicitedMessageOnPooledConnection: a message the backend sends
// on a connection without a query for it (the rest of a zone transfer, or
// any answer out of step) must not fail the next, unrelated query that
// reuses the connection, nor count against the backend.
func TestUnsolicitedMessageOnPooledConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(conn, n int, q *dns.Msg) (now, later []*dns.Msg)
	}{
		{"extra message in the answer's segment", func(conn, n int, q *dns.Msg) (now, later []*dns.Msg) {
			if conn == 1 && n == 1 {
				return []*dns.Msg{plainAnswer(q), zoneTail(q)}, nil
			}
			return nil, nil
		}},
		{"extra message after the answer", func(conn, n int, q *dns.Msg) (now, later []*dns.Msg) {
			if conn == 1 && n == 1 {
				return []*dns.Msg{plainAnswer(q)}, []*dns.Msg{zoneTail(q)}
			}
			return nil, nil
		}},
		{"answer to another question with the query's ID", func(conn, n int, q *dns.Msg) (now, later []*dns.Msg) {
			if conn == 1 && n == 2 {
				other := plainAnswer(q)
				other.Question[0].Name = "first.example."
				other.Answer[0].Header().Name = "first.example."
				return []*dns.Msg{other}, nil
			}
			return nil, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startStrayBackend(t, tc.reply)
			p, set := newPool(t, Config{Backend: b.addr})
			exchange(t, p, "first.example.")
			time.Sleep(50 * time.Millisecond) // the late message is on its way
			r, err := p.Exchange(context.Background(), dnstest.Query("second.example.", dns.TypeA))
			if err != nil {
				t.Fatalf("the next query failed: %v", err)
			}
			if len(r.Question) != 1 || r.Question[0].Name != "second.example." || answeredBy(r) != "10.0.0.1" {
				t.Fatalf("the next query got %v", r)
			}
			for _, s := range []struct {
				family string
				labels []string
				want   float64
			}{
				{"nodedns_upstream_stray_messages_total", []string{"upstream", "backend"}, 1},
				{"nodedns_upstream_requests_total", []string{"upstream", "backend", "result", "ok"}, 2},
				{"nodedns_upstream_requests_total", []string{"upstream", "backend", "result", "error"}, 0},
			} {
				if got := metricstest.Value(t, set, s.family, s.labels...); got != s.want {
					t.Errorf("%s%v = %v, want %v", s.family, s.labels, got, s.want)
				}
			}
			if n := b.accepted.Load(); n != 2 {
				t.Errorf("backend accepted %d connections, want 2: the one out of step dropped, one new", n)
			}
			// The new connection is pooled and in step.
			exchange(t, p, "third.example.")
			if n := b.accepted.Load(); n != 2 {
				t.Errorf("backend accepted %d connections after a third query, want still 2", n)
			}
		})
	}
}
