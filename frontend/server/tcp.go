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
// false means c is to be closed (the refusal is counted).
func (s *Server) acceptConn(c net.Conn) (srcKey, bool) {
	src := tcpSource(c)
	if s.tcpCount.Add(1) > int64(s.cfg.MaxTCPConns) {
		s.tcpCount.Add(-1)
		s.refuse(refusedTCPTotal)
		return src, false
	}
	if !s.sources.take(src, srcConns, s.cfg.MaxTCPConnsPerSource) {
		s.tcpCount.Add(-1)
		s.refuse(refusedTCPSource)
		return src, false
	}
	return src, true
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
	wmu     sync.Mutex    // serialises writes: one message at a time
	hdr     [2]byte       // length prefix, guarded by wmu
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
		s.dropConn(c.src)
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
		}
	}
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
	resp, ok := s.serveFast((*bp)[:0], req, c.proto)
	if !ok {
		if s.acquire(c.src) {
			c.miss(req)
		} else {
			c.write(s.overloaded((*bp)[:0], req, c.proto))
		}
	} else {
		c.write(resp)
	}
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

func (c *tcpConn) miss(req []byte) {
	c.slots <- struct{}{} // released by runTCP
	j := c.s.jobs.Get().(*missJob)
	j.c = c
	j.req = append(j.req[:0], req...)
	c.pending.Add(1)
	c.npend.Add(1)
	go j.runTCP()
}

func (j *missJob) runTCP() {
	s, c := j.s, j.c
	resp := s.serveSlow(j.dst, j.req, c.proto)
	s.release(c.src)
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
