package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// acceptLoop accepts TCP connections on l until StopReading.
func (s *Server) acceptLoop(l net.Listener) {
	defer s.readers.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if s.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			s.m.tcpReadErr.Inc()
			s.log.Debug("tcp accept", zap.String("addr", l.Addr().String()), zap.Error(err))
			// Out of file descriptors and the like: do not spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		src, ok := s.acceptConn(c)
		if !ok {
			_ = c.Close()
			continue
		}
		tc := &tcpConn{s: s, conn: c, proto: tcpProto(c), src: src, slots: make(chan struct{}, maxPendingPerConn)}
		tc.lastActive.Store(time.Now().UnixNano())
		s.mu.Lock()
		if s.stopping.Load() {
			s.mu.Unlock()
			s.dropConn(src)
			_ = c.Close()
			return
		}
		s.conns[tc] = struct{}{}
		s.mu.Unlock()
		s.m.tcpConns.Inc()
		s.readers.Add(1)
		go tc.serve()
	}
}

// acceptConn takes a connection slot of the server and one of c's client;
// false means c is to be closed (the refusal is counted). When no slot is
// free, the oldest idle connection is closed to make room (RFC 7766
// section 6.2.3: a server short of connections closes idle ones rather
// than refuse new ones), of the same client first (evictIdle).
func (s *Server) acceptConn(c net.Conn) (srcKey, bool) {
	src := tcpSource(c)
	if s.cfg.Sources != nil && !s.cfg.Sources.Allowed(src) {
		s.m.tcpDenied.Inc()
		return src, false
	}
	share := s.cfg.MaxTCPConnsPerSource
	if s.local.has(src) {
		share = max(share, s.cfg.MaxTCPConns/sharedShareDiv)
	}
	reason, ok := s.takeConn(src, share)
	if !ok && s.evictIdle(src, reason == refusedTCPSource) {
		reason, ok = s.takeConn(src, share)
	}
	if !ok {
		s.refuse(reason)
	}
	return src, ok
}

// takeConn takes the slots of a new connection of src, which may hold
// share; false says which limit was reached.
func (s *Server) takeConn(src srcKey, share int) (refusal, bool) {
	if s.tcpCount.Add(1) > int64(s.cfg.MaxTCPConns) {
		s.tcpCount.Add(-1)
		return refusedTCPTotal, false
	}
	if !s.sources.take(src, srcConns, share) {
		s.tcpCount.Add(-1)
		return refusedTCPSource, false
	}
	return 0, true
}

// evictIdle closes the connection that has been idle longest (no answer
// owed) among those of src or, unless sameOnly, among all, and gives back
// its slots at once; false when none is idle. Idle connections of the
// same client go first: that client chose to hold them, and only they
// free a slot of its share. It walks every connection, at most
// MaxTCPConns, only when a new one finds no free slot.
func (s *Server) evictIdle(src srcKey, sameOnly bool) bool {
	s.mu.Lock()
	var same, any *tcpConn
	for c := range s.conns {
		if c.npend.Load() > 0 || c.released.Load() {
			continue
		}
		at := c.lastActive.Load()
		if c.src == src && (same == nil || at < same.lastActive.Load()) {
			same = c
		}
		if any == nil || at < any.lastActive.Load() {
			any = c
		}
	}
	s.mu.Unlock()
	victim := same
	if victim == nil && !sameOnly {
		victim = any
	}
	if victim == nil || !victim.release() {
		return false
	}
	// Its serve loop ends on the closed socket and skips the slots
	// already given back.
	_ = victim.conn.Close()
	s.m.tcpEvicted.Inc()
	return true
}

// dropConn gives back the slots acceptConn took.
func (s *Server) dropConn(src srcKey) {
	s.sources.give(src, srcConns)
	s.tcpCount.Add(-1)
}

// tcpProto is the Proto of queries on c.
func tcpProto(c net.Conn) Proto {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.IP.To4() == nil {
		return TCP | IPv6
	}
	return TCP
}

// tcpConn is one client connection (RFC 7766): queries are read in order
// and answered as they resolve, hits inline, misses on goroutines, so a
// pipelined slow query does not hold up the ones behind it (section 6.2.1.1).
type tcpConn struct {
	s       *Server
	conn    net.Conn
	proto   Proto          // TCP, with IPv6 for an IPv6 client
	src     srcKey         // the client, whose connection slot c holds
	pending sync.WaitGroup // misses whose answer is not written yet
	npend   atomic.Int32
	slots   chan struct{} // one per pending miss; bounds a connection's share
	// lastActive is when the connection was accepted or last read a
	// query (unix ns): evictIdle closes the oldest first.
	lastActive atomic.Int64
	// released is set once its slots are given back: by serve's end, or
	// by evictIdle, which then closes the connection.
	released atomic.Bool
	wmu      sync.Mutex // serialises writes: one message at a time
	hdr      [2]byte    // length prefix, guarded by wmu
}

func (c *tcpConn) serve() {
	s := c.s
	defer s.readers.Done()
	defer func() {
		c.pending.Wait()
		_ = c.conn.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.release()
		s.m.tcpConns.Dec()
	}()
	var lenBuf [2]byte
	// The idle deadline moves only when a query is read (or an answer is
	// still owed): messages that do no work do not keep a slot.
	deadline := c.idleDeadline()
	for {
		_ = c.conn.SetReadDeadline(deadline)
		// Checked after setting the deadline: StopReading sets the flag
		// before it moves every deadline to the past, so either it sees
		// this deadline or this sees its flag.
		if s.stopping.Load() {
			return
		}
		if _, err := io.ReadFull(c.conn, lenBuf[:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && c.npend.Load() > 0 && !s.stopping.Load() {
				deadline = c.idleDeadline()
				continue // idle only once every answer is out
			}
			c.readErr(err)
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n > maxTCPRequest {
			// No query is this long (maxTCPRequest): close rather than
			// read it, as unbound drops what is larger than its buffer.
			s.m.tcpIn.Inc()
			s.m.dropped.Inc()
			return
		}
		if !c.query(n) {
			return
		}
		if n >= headerLen {
			deadline = c.idleDeadline()
			c.lastActive.Store(time.Now().UnixNano())
		}
	}
}

// release gives back c's connection slots, once; false when they were
// already given back.
func (c *tcpConn) release() bool {
	if !c.released.CompareAndSwap(false, true) {
		return false
	}
	c.s.dropConn(c.src)
	return true
}

// idleDeadline is when the connection is idle if it sends no query before:
// the idle timeout shrinks as the server's connection slots fill.
func (c *tcpConn) idleDeadline() time.Time {
	s := c.s
	return time.Now().Add(tcpIdleTimeout(s.cfg.TCPIdleTimeout, s.tcpCount.Load(), int64(s.cfg.MaxTCPConns)))
}

// query reads a message of n bytes (at most maxTCPRequest) into a pooled
// buffer and answers it; false means the connection is done.
func (c *tcpConn) query(n int) bool {
	s := c.s
	rb := s.reqBufs.Get().(*[maxTCPRequest]byte)
	defer s.reqBufs.Put(rb)
	req := rb[:n]
	if _, err := io.ReadFull(c.conn, req); err != nil {
		c.readErr(err)
		return false
	}
	s.m.tcpIn.Inc()
	if n < headerLen {
		s.m.dropped.Inc()
		return true
	}
	bp := s.bigBufs.Get().(*[]byte)
	var start time.Time
	sampled := s.obs != nil && s.obs.sample()
	if sampled {
		start = time.Now()
	}
	resp, ok := s.serveFast((*bp)[:0], req, c.proto)
	a := answerHit
	if !ok {
		if dom, ok := s.acquire(c.src, req); ok {
			c.miss(req, dom, start)
			s.bigBufs.Put(bp)
			return true
		}
		resp, a = s.overloaded((*bp)[:0], req, c.proto), answerOverload
	}
	if s.obs != nil {
		s.obs.note(s.obs.tcpTalkers, true, c.src, c.proto, req, resp, a, sampled, start)
	}
	c.write(resp)
	s.bigBufs.Put(bp)
	return true
}

// readErr counts a read error unless it is the normal end of a connection.
func (c *tcpConn) readErr(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return
	}
	c.s.m.tcpReadErr.Inc()
	c.s.log.Debug("tcp read", zap.String("remote", c.conn.RemoteAddr().String()), zap.Error(err))
}

// maxPendingPerConn bounds the misses one connection has in flight: past
// it the connection is not read until one is answered, so that a single
// pipelining client cannot take every in-flight slot of the server.
const maxPendingPerConn = 64

func (c *tcpConn) miss(req []byte, dom domKey, start time.Time) {
	c.slots <- struct{}{} // released by runTCP
	j := c.s.jobs.Get().(*missJob)
	j.c, j.dom, j.start = c, dom, start
	j.req = append(j.req[:0], req...)
	c.pending.Add(1)
	c.npend.Add(1)
	go j.runTCP()
}

func (j *missJob) runTCP() {
	s, c := j.s, j.c
	resp := s.serveSlow(j.dst, j.req, c.proto, c.src)
	s.release(c.src, j.dom)
	if s.obs != nil {
		s.obs.note(s.obs.tcpTalkers, true, c.src, c.proto, j.req, resp, answerMiss, !j.start.IsZero(), j.start)
	}
	c.write(resp)
	c.npend.Add(-1)
	<-c.slots
	c.pending.Done()
	j.put()
}

// write sends one length-prefixed message (RFC 1035 section 4.2.2) with a
// single writev. Responses are already bounded to maxMessage by serveFast
// and serveSlow.
func (c *tcpConn) write(resp []byte) {
	if len(resp) == 0 {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	binary.BigEndian.PutUint16(c.hdr[:], uint16(len(resp)))
	bufs := net.Buffers{c.hdr[:], resp}
	// A client that stops reading must not hold a goroutine forever.
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.s.cfg.TCPIdleTimeout))
	if _, err := bufs.WriteTo(c.conn); err != nil {
		c.s.m.tcpWriteErr.Inc()
		c.s.log.Debug("tcp write", zap.String("remote", c.conn.RemoteAddr().String()), zap.Error(err))
		return
	}
	c.s.m.tcpOut.Inc()
}
