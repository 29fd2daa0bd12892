package holder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// relayIdleTimeout is how long a connection to a relay address may stay
// idle before it is dropped rather than reused: below CoreDNS's TCP idle
// timeout (10s), so that a pooled connection is rarely found closed under
// a query. The idle connections kept per address are bounded by
// Config.RelayMaxInflight, the in-flight bound, as the frontend's pool
// is: a bound below the concurrency would close a connection on each
// return past it and dial another for the next query, a handshake and a
// conntrack entry (the relay address is a ClusterIP) for each.
const (
	relayIdleTimeout = 5 * time.Second
	// relaySlotWait is how long a query read while every in-flight slot
	// is taken waits for one. Relaying starts with a second of queries
	// queued in the sockets (RelayAfter), read at once: they are relayed
	// as slots free, within milliseconds each from a live relay address,
	// rather than answered SERVFAIL (which fails a pod's lookup). The
	// reader waits meanwhile, so the queries behind stay in the socket,
	// where a frontend saying hello finds them. A wait that ends without
	// a slot (the relay addresses slow or silent) sets the relay
	// shedding: further queries get SERVFAIL at once until a slot frees,
	// so that a hung relay address cannot age the queue past the
	// clients' timeout.
	relaySlotWait = 500 * time.Millisecond
	// relayClientIdle closes a client's TCP connection idle this long.
	relayClientIdle = 10 * time.Second
	// deniedLogEvery bounds the log lines about sources outside
	// Config.Sources: the first one, then at most one a minute.
	deniedLogEvery = time.Minute
)

// relay answers the queries that reach held sockets while no frontend
// runs, through DNS servers over TCP (in the chart, the fallback Service:
// other nodes' backends). It reads through duplicates of the held
// descriptors in Go's poller; the held descriptors themselves stay plain
// integers, to be offered to the next frontend.
type relay struct {
	cfg Config
	log *zap.Logger

	slots chan struct{} // one per query in flight
	conns chan struct{} // one per client TCP connection
	done  chan struct{} // closed by stop
	// shedding is set when a wait for a slot ended without one, and
	// cleared when a slot is taken (relaySlotWait).
	shedding atomic.Bool

	mu      sync.Mutex
	stopped bool
	pcs     []net.PacketConn
	ls      []*net.TCPListener
	clients map[net.Conn]struct{}
	idle    map[string][]idleConn

	readers sync.WaitGroup // the UDP readers and the accept loops
	start   time.Time

	relayed, servfail, formerr, dropped atomic.Int64
	// denied counts the UDP queries and TCP connections of sources
	// outside Config.Sources; deniedLog is when one was last logged (Unix
	// nanoseconds, 0: never).
	denied, deniedLog atomic.Int64
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// startRelay reads fds (the held sockets, which stay the caller's)
// through duplicates and relays what it reads. It fails only when it can
// read none of them.
func startRelay(cfg Config, log *zap.Logger, fds []int) (*relay, error) {
	r := &relay{
		cfg:     cfg,
		log:     log,
		slots:   make(chan struct{}, cfg.RelayMaxInflight),
		conns:   make(chan struct{}, cfg.RelayMaxConns),
		done:    make(chan struct{}),
		clients: make(map[net.Conn]struct{}),
		idle:    make(map[string][]idleConn),
		start:   time.Now(),
	}
	var errs []error
	for _, fd := range fds {
		if err := r.add(fd); err != nil {
			errs = append(errs, err)
		}
	}
	if len(r.pcs)+len(r.ls) == 0 {
		return nil, fmt.Errorf("no held socket can be read: %w", errors.Join(errs...))
	}
	for _, err := range errs {
		log.Warn("a held socket is not relayed", zap.Error(err))
	}
	for _, pc := range r.pcs {
		r.readers.Go(func() { r.readUDP(pc) })
	}
	for _, l := range r.ls {
		r.readers.Go(func() { r.accept(l) })
	}
	return r, nil
}

// add opens fd for reading through a duplicate. net.FilePacketConn and
// net.FileListener duplicate it once more and set O_NONBLOCK on the open
// socket, which the frontend shares: it sets the flag itself anyway.
func (r *relay) add(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("socket type: %w", err)
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("duplicate: %w", err)
	}
	f := os.NewFile(uintptr(d), "held")
	defer f.Close()
	switch typ {
	case unix.SOCK_DGRAM:
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return err
		}
		r.pcs = append(r.pcs, pc)
	case unix.SOCK_STREAM:
		l, err := net.FileListener(f)
		if err != nil {
			return err
		}
		tl, ok := l.(*net.TCPListener)
		if !ok {
			_ = l.Close()
			return fmt.Errorf("listener of type %T, not TCP", l)
		}
		r.ls = append(r.ls, tl)
	default:
		return fmt.Errorf("socket type %d, neither UDP nor TCP", typ)
	}
	return nil
}

// stop stops reading: the readers and the accept loops return at once,
// and client connections are read no further. It waits for the readers
// only; queries already read are still answered, through the duplicates,
// which are closed after their last answer.
func (r *relay) stop() {
	r.mu.Lock()
	r.stopped = true
	close(r.done)
	now := time.Now()
	for _, pc := range r.pcs {
		_ = pc.SetReadDeadline(now)
	}
	for _, l := range r.ls {
		_ = l.SetDeadline(now)
	}
	for c := range r.clients {
		_ = c.SetReadDeadline(now)
	}
	for _, conns := range r.idle {
		for _, ic := range conns {
			_ = ic.c.Close()
		}
	}
	r.idle = nil
	r.mu.Unlock()
	r.readers.Wait()
	for _, l := range r.ls {
		_ = l.Close() // a duplicate: the held listener keeps its queue
	}
}

// counts returns the relay's counters for the log.
func (r *relay) counts() []zap.Field {
	return []zap.Field{
		zap.Duration("relayed_for", time.Since(r.start).Round(time.Millisecond)),
		zap.Int64("relayed", r.relayed.Load()),
		zap.Int64("servfail", r.servfail.Load()),
		zap.Int64("formerr", r.formerr.Load()),
		zap.Int64("dropped", r.dropped.Load()),
		zap.Int64("denied", r.denied.Load()),
	}
}

func (r *relay) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// readUDP reads pc's datagrams until stop and answers each in a goroutine
// of its own, within the bound on queries in flight. pc is closed once
// the last answer is written.
func (r *relay) readUDP(pc net.PacketConn) {
	var inflight sync.WaitGroup
	defer func() {
		go func() {
			inflight.Wait()
			_ = pc.Close()
		}()
	}()
	// One buffer per socket for reading; each query keeps a copy of its
	// own size, so that silent relay addresses cost no 64 KiB per query.
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if r.isStopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			// An error of one datagram (an ICMP error queued on the
			// socket): the next read goes on.
			time.Sleep(time.Millisecond)
			continue
		}
		if !r.allowed(addr) {
			// Answered here, taking no slot: a flood from outside uses
			// none of the pods' share of the relay.
			if resp := errorAnswer(buf[:n], dns.RcodeRefused); resp != nil {
				_, _ = pc.WriteTo(resp, addr)
			}
			continue
		}
		got := r.acquire(r.done)
		if got == slotNone {
			if resp := r.fail(buf[:n], dns.RcodeServerFailure); resp != nil {
				_, _ = pc.WriteTo(resp, addr)
			}
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		inflight.Go(func() {
			// Stopped while waiting: the query read is still answered,
			// its wait goes on here and the reader returns.
			if got == slotStopped && r.acquire(nil) == slotNone {
				if resp := r.fail(q, dns.RcodeServerFailure); resp != nil {
					_, _ = pc.WriteTo(resp, addr)
				}
				return
			}
			defer func() { <-r.slots }()
			if resp := r.answer(q, true); resp != nil {
				_, _ = pc.WriteTo(resp, addr)
			}
		})
	}
}

// Results of acquire.
const (
	slotTaken   = iota // a slot is taken: release it after the answer
	slotNone           // none freed within relaySlotWait, or shedding
	slotStopped        // stop came first: no slot taken
)

// acquire takes an in-flight slot: at once when one is free; else, unless
// the relay is shedding, within relaySlotWait, or until done is closed.
func (r *relay) acquire(done <-chan struct{}) int {
	select {
	case r.slots <- struct{}{}:
		r.shedding.Store(false)
		return slotTaken
	default:
	}
	if r.shedding.Load() {
		return slotNone
	}
	t := time.NewTimer(relaySlotWait)
	defer t.Stop()
	select {
	case r.slots <- struct{}{}:
		return slotTaken
	case <-done:
		return slotStopped
	case <-t.C:
		r.shedding.Store(true)
		return slotNone
	}
}

// accept takes l's connections until stop and serves each, within the
// bound on connections.
func (r *relay) accept(l *net.TCPListener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if r.isStopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !r.allowed(c.RemoteAddr()) {
			_ = c.Close()
			continue
		}
		select {
		case r.conns <- struct{}{}:
		default:
			// Closed at once: the client tries again or its next
			// nameserver, rather than wait on a connection nobody reads.
			r.dropped.Add(1)
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.clients[c] = struct{}{}
		r.mu.Unlock()
		go r.serveTCP(c)
	}
}

// serveTCP answers c's queries one after the other until c is idle for
// relayClientIdle, fails or the relay stops.
func (r *relay) serveTCP(c net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.clients, c)
		r.mu.Unlock()
		_ = c.Close()
		<-r.conns
	}()
	for {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(relayClientIdle))
		r.mu.Unlock()
		q, err := readMsg(c)
		if err != nil {
			return
		}
		var resp []byte
		if r.acquire(nil) == slotTaken {
			resp = r.answer(q, false)
			<-r.slots
		} else {
			resp = r.fail(q, dns.RcodeServerFailure)
		}
		if resp == nil {
			return // not a query: the stream cannot be trusted further
		}
		_ = c.SetWriteDeadline(time.Now().Add(r.cfg.RelayTimeout))
		if err := writeMsg(c, resp); err != nil {
			return
		}
	}
}

// readMsg reads one length-prefixed DNS message into a buffer of its size.
func readMsg(c net.Conn) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	m := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, m); err != nil {
		return nil, err
	}
	return m, nil
}

// writeMsg writes m with its length prefix in one write.
func writeMsg(c net.Conn, m []byte) error {
	b := make([]byte, 2+len(m))
	binary.BigEndian.PutUint16(b, uint16(len(m)))
	copy(b[2:], m)
	_, err := c.Write(b)
	return err
}

// answer returns the answer to the query q: the relay's, else SERVFAIL;
// FORMERR when q does not parse, nil when it is no query at all. udp
// truncates the answer to the client's UDP size.
func (r *relay) answer(q []byte, udp bool) []byte {
	var m dns.Msg
	if err := m.Unpack(q); err != nil || m.Response || len(m.Question) != 1 {
		return r.fail(q, dns.RcodeFormatError)
	}
	resp, err := r.exchange(q)
	if err != nil {
		r.log.Debug("relay", zap.String("name", m.Question[0].Name), zap.Error(err))
		return r.fail(q, dns.RcodeServerFailure)
	}
	r.relayed.Add(1)
	size := dns.MinMsgSize
	if opt := m.IsEdns0(); opt != nil {
		size = max(size, int(opt.UDPSize()))
	}
	if !udp || len(resp) <= size {
		return resp
	}
	var a dns.Msg
	if err := a.Unpack(resp); err != nil {
		r.relayed.Add(-1)
		return r.fail(q, dns.RcodeServerFailure)
	}
	a.Truncate(size)
	out, err := a.Pack()
	if err != nil {
		r.relayed.Add(-1)
		return r.fail(q, dns.RcodeServerFailure)
	}
	return out
}

// allowed reports whether the client at addr may be answered
// (Config.Sources). A denied one is counted, and logged when it is the
// first or the last log line is deniedLogEvery old.
func (r *relay) allowed(addr net.Addr) bool {
	if r.cfg.Sources == nil {
		return true
	}
	src := sourceKey(addr)
	if r.cfg.Sources.Allowed(src) {
		return true
	}
	n := r.denied.Add(1)
	now := time.Now().UnixNano()
	if last := r.deniedLog.Load(); (last == 0 || now-last >= int64(deniedLogEvery)) && r.deniedLog.CompareAndSwap(last, now) {
		r.log.Warn("a source outside --allow-networks asked: REFUSED over UDP, connection closed over TCP; further ones are counted (denied), logged at most once a minute",
			zap.Stringer("source", netip.AddrFrom16(src).Unmap()), zap.Int64("denied", n), zap.String("allow_networks", allowNetworks(r.cfg.Sources)))
	}
	return false
}

// sourceKey returns the address of a client in the 16-byte form of
// srcpolicy (IPv4 as ::ffff:a.b.c.d); all zeroes when addr is neither UDP
// nor TCP, which no policy allows but loopback's.
func sourceKey(addr net.Addr) [16]byte {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	}
	return ap.Addr().As16()
}

// fail returns an answer of rcode to q, with q's question when it parses,
// or nil when q is no query (too short for a header, or a response: never
// answer those, two servers could bounce them forever).
func (r *relay) fail(q []byte, rcode int) []byte {
	out := errorAnswer(q, rcode)
	switch {
	case out == nil:
		r.dropped.Add(1)
	case rcode == dns.RcodeFormatError:
		r.formerr.Add(1)
	default:
		r.servfail.Add(1)
	}
	return out
}

// errorAnswer returns an answer of rcode to q, with q's question when it
// parses, or nil when q is no query, as fail, counting nothing.
func errorAnswer(q []byte, rcode int) []byte {
	var h dns.Msg
	if len(q) < 12 || q[2]&0x80 != 0 {
		return nil
	}
	var m dns.Msg
	if err := m.Unpack(q); err == nil && len(m.Question) == 1 && !m.Response {
		h.SetRcode(&m, rcode)
		if m.IsEdns0() != nil {
			h.SetEdns0(dns.DefaultMsgSize, false)
		}
	} else {
		// The header alone: ID and opcode, no question.
		h.Id = binary.BigEndian.Uint16(q)
		h.Opcode = int(q[2]>>3) & 0xf
		h.Response = true
		h.RecursionDesired = q[2]&1 != 0
		h.Rcode = rcode
	}
	out, err := h.Pack()
	if err != nil {
		return nil
	}
	return out
}

// exchange sends q to the relay addresses in turn and returns the first
// answer, all within RelayTimeout: each address gets an equal share of
// what is left, so that a hung first address leaves time for the next.
func (r *relay) exchange(q []byte) ([]byte, error) {
	deadline := time.Now().Add(r.cfg.RelayTimeout)
	var errs []error
	for i, addr := range r.cfg.Relay {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		until := time.Now().Add(left / time.Duration(len(r.cfg.Relay)-i))
		resp, err := r.try(addr, q, until)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	if len(errs) == 0 {
		return nil, errors.New("no relay address")
	}
	return nil, errors.Join(errs...)
}

// relayRedials is how many more times a refused dial of a relay address
// is made: with one dead endpoint of two, all six fail one time in 64.
const relayRedials = 5

// relayDial dials a relay address (a variable for the tests).
var relayDial = func(d *net.Dialer, addr string) (net.Conn, error) { return d.Dial("tcp", addr) }

// try exchanges q with addr over a pooled connection, or a new one when
// the pooled one fails before answering (the server closed it idle).
func (r *relay) try(addr string, q []byte, until time.Time) ([]byte, error) {
	if c := r.pooled(addr); c != nil {
		resp, err := roundTrip(c, q, until)
		if err == nil {
			r.put(addr, c)
			return resp, nil
		}
		_ = c.Close()
		if time.Now().After(until) {
			return nil, err
		}
	}
	d := net.Dialer{Deadline: until}
	c, err := relayDial(&d, addr)
	// A relay address is a Service's ClusterIP: kube-proxy sends each new
	// connection to one of its endpoints, and a refusal tells of that one
	// only (a backend that died and is still listed, as while the API
	// server is down), so the dial is made again at once, as the
	// frontend's fallback does (upstream's fallbackRedials).
	for i := 0; err != nil && i < relayRedials && errors.Is(err, unix.ECONNREFUSED) && time.Now().Before(until); i++ {
		c, err = relayDial(&d, addr)
	}
	if err != nil {
		return nil, err
	}
	resp, err := roundTrip(c, q, until)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	r.put(addr, c)
	return resp, nil
}

// roundTrip writes q on c and reads its answer by until.
func roundTrip(c net.Conn, q []byte, until time.Time) ([]byte, error) {
	_ = c.SetDeadline(until)
	if err := writeMsg(c, q); err != nil {
		return nil, err
	}
	resp, err := readMsg(c)
	if err != nil {
		return nil, err
	}
	if len(resp) < 12 || resp[0] != q[0] || resp[1] != q[1] {
		return nil, errors.New("an answer to another query")
	}
	return resp, nil
}

// pooled returns an idle connection to addr, or nil.
func (r *relay) pooled(addr string) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	for conns := r.idle[addr]; len(conns) > 0; conns = r.idle[addr] {
		ic := conns[len(conns)-1]
		r.idle[addr] = conns[:len(conns)-1]
		if time.Since(ic.since) < relayIdleTimeout {
			return ic.c
		}
		_ = ic.c.Close()
	}
	return nil
}

// put keeps c for reuse, or closes it when the relay stopped or the pool
// is full.
func (r *relay) put(addr string, c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || len(r.idle[addr]) >= r.cfg.RelayMaxInflight {
		_ = c.Close()
		return
	}
	r.idle[addr] = append(r.idle[addr], idleConn{c: c, since: time.Now()})
}
