package upstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
)

// address is one upstream: its idle connections and its health.
//
// A connection carries one query at a time. CoreDNS (like every miekg/dns
// server) reads and answers the queries of one TCP connection one after the
// other, so pipelining on a single connection would queue a cheap cluster
// name behind a slow forwarded one; several connections, each reused for
// the next query, give the backend real concurrency with the same saving
// of handshakes.
type address struct {
	addr    string
	kind    string // kindBackend or kindFallback
	timeout time.Duration
	idleFor time.Duration
	maxIdle int
	health  health
	m       *poolMetrics
	km      *kindMetrics // the series of kind
	healthy *vm.Gauge    // nodedns_upstream_healthy of this address
	dialer  net.Dialer

	mu     sync.Mutex
	idle   []*conn // least recently used first; guarded by mu
	closed bool    // no connection is pooled after Close; guarded by mu
}

// conn is one TCP connection with its read buffers.
type conn struct {
	nc   net.Conn
	w    io.Writer // writes to nc (rawIO), and r reads from it
	r    *bufio.Reader
	hdr  [2]byte   // length prefix, a field so that reading it does not allocate
	buf  []byte    // reused for each response body
	used time.Time // when it was last put back in the pool
	a    *address
}

// exchange sends wire (a query with its 2-byte length prefix, RFC 1035
// section 4.2.2) and returns the checked response. The whole attempt, dial
// and a retry included, ends at the deadline: the attempt timeout from now
// on the wall clock, or ctx's deadline if earlier. now (the pool's clock)
// only dates connections for idle expiry.
//
// One retry on a new connection, within the same deadline, covers the two
// ways a connection goes bad without the address being at fault: a pooled
// connection the peer closed while it sat idle (the others are flushed
// too), and a response that does not match the query (RFC 5452 section
// 9.1), such as a message the backend sent unasked on that connection (the
// rest of a streamed zone transfer, RFC 5936 section 2.2) that was waiting
// ahead of the answer. A mismatch is counted in
// nodedns_upstream_stray_messages_total, not as a failure of the address:
// the attempt's result is that of the new connection.
func (a *address) exchange(ctx context.Context, now time.Time, wire []byte, id uint16, q dns.Question) (*dns.Msg, error) {
	start := time.Now()
	deadline := start.Add(a.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c, reused := a.get(now)
	if c == nil {
		var err error
		if c, err = a.dial(ctx, deadline); err != nil {
			return nil, err
		}
	}
	r, err := c.roundTrip(ctx, deadline, wire, id, q)
	if mismatch := errors.Is(err, ErrMismatch); mismatch || (err != nil && reused && deadConn(err)) {
		c.close()
		if mismatch {
			a.km.stray.Inc()
		} else {
			// What every pooled connection looks like after the backend
			// restarts: drop the others too.
			a.flush()
		}
		if c, err = a.dial(ctx, deadline); err != nil {
			return nil, err
		}
		r, err = c.roundTrip(ctx, deadline, wire, id, q)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	// Dated by the end of the exchange on the pool's clock, so that the
	// idle list stays in the order of its dates.
	a.put(c, now.Add(time.Since(start)))
	return r, nil
}

// fallbackRedials is how many more times a refused dial of a fallback
// address is made at once. A fallback is usually a Service's ClusterIP,
// which kube-proxy sends each new connection to one of its endpoints: a
// refusal tells of that endpoint only, say a backend that died and whose
// endpoint has not left the EndpointSlice yet, and the next dial may reach
// a live one. With one dead endpoint of two, six dials all fail one time
// in 64 (three, one time in eight); a refused dial on the node's network
// costs tens of microseconds, so the five more are cheap even when every
// endpoint is dead.
const fallbackRedials = 5

func (a *address) dial(ctx context.Context, deadline time.Time) (*conn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := a.dialer.DialContext(ctx, "tcp", a.addr)
	for i := 0; err != nil && a.kind == kindFallback && i < fallbackRedials && Reason(err) == ReasonRefused && ctx.Err() == nil; i++ {
		nc, err = a.dialer.DialContext(ctx, "tcp", a.addr)
	}
	if err != nil {
		return nil, err
	}
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	a.m.connsOpen.Inc()
	rio := newRawIO(rc)
	return &conn{nc: nc, w: rio, r: bufio.NewReaderSize(rio, 2048), a: a}, nil
}

// get returns the most recently used idle connection that has not expired,
// or nil. Taking the newest keeps the set of busy connections small and
// lets the oldest ones expire.
func (a *address) get(now time.Time) (c *conn, reused bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n := len(a.idle); n > 0; n = len(a.idle) {
		c = a.idle[n-1]
		a.idle[n-1] = nil
		a.idle = a.idle[:n-1]
		if now.Sub(c.used) < a.idleFor {
			return c, true
		}
		c.close() // expired, and so is everything older
		for _, old := range a.idle {
			old.close()
		}
		clear(a.idle)
		a.idle = a.idle[:0]
	}
	return nil, false
}

// put returns a healthy connection to the pool, or closes it when the pool
// is full or closed, or when bytes follow the answer just read: they answer
// no query in flight, so the connection is out of step (counted as a stray
// message, as one read in place of an answer is).
func (a *address) put(c *conn, now time.Time) {
	if c.r.Buffered() > 0 {
		a.km.stray.Inc()
		c.close()
		return
	}
	c.used = now
	a.mu.Lock()
	if a.closed || len(a.idle) >= a.maxIdle {
		a.mu.Unlock()
		c.close()
		return
	}
	a.idle = append(a.idle, c)
	a.mu.Unlock()
}

// expire closes the connections idle since before now minus the idle timeout.
func (a *address) expire(now time.Time) {
	a.mu.Lock()
	n := 0
	for n < len(a.idle) && now.Sub(a.idle[n].used) >= a.idleFor {
		n++
	}
	old := append([]*conn(nil), a.idle[:n]...)
	a.idle = append(a.idle[:0], a.idle[n:]...)
	clear(a.idle[len(a.idle):cap(a.idle)])
	a.mu.Unlock()
	for _, c := range old {
		c.close()
	}
}

// flush closes every idle connection; with closed set, later ones too.
func (a *address) flush() { a.drain(false) }

func (a *address) drain(closed bool) {
	a.mu.Lock()
	old := a.idle
	a.idle = nil
	a.closed = a.closed || closed
	a.mu.Unlock()
	for _, c := range old {
		c.close()
	}
}

func (c *conn) close() {
	_ = c.nc.Close()
	c.a.m.connsOpen.Dec()
}

// messageRestTimeout bounds the wait for the rest of a response once its
// length prefix has come. The backend writes each message whole; over
// loopback the rest follows in microseconds, and from a fallback on
// another node within a few round trips. A peer that sent part of a
// message and stopped is hung in the middle of writing it: its connection
// is closed (the next query dials a new one) after this long rather than
// at the attempt's deadline, so that the query moves on to the next
// address in time to be answered.
const messageRestTimeout = time.Second

// roundTrip writes wire and reads one response, then checks that its ID and
// question match the query (RFC 5452 section 9.1). On a mismatch the
// connection is out of step and the caller closes it. The body of the
// response must follow its length prefix within messageRestTimeout.
func (c *conn) roundTrip(ctx context.Context, deadline time.Time, wire []byte, id uint16, q dns.Question) (*dns.Msg, error) {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if ctx.Done() != nil {
		// Close the pool promptly: unblock the read when ctx ends.
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	if _, err := c.w.Write(wire); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		return nil, err
	}
	if rest := time.Now().Add(messageRestTimeout); rest.Before(deadline) {
		if err := c.nc.SetReadDeadline(rest); err != nil {
			return nil, err
		}
		if ctx.Err() != nil { // the pool closed as the deadline moved: end now
			return nil, ctx.Err()
		}
	}
	n := int(binary.BigEndian.Uint16(c.hdr[:]))
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	b := c.buf[:n]
	if _, err := io.ReadFull(c.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		return nil, fmt.Errorf("unpack response: %w", err)
	}
	if err := check(r, id, q); err != nil {
		return nil, err
	}
	return r, nil
}

// check verifies that r answers the query with ID id and question q.
func check(r *dns.Msg, id uint16, q dns.Question) error {
	if r.Id != id {
		return fmt.Errorf("%w: ID %d, want %d", ErrMismatch, r.Id, id)
	}
	return MatchQuestion(r, q)
}
