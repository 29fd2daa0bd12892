package server

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// udpSocket is one SO_REUSEPORT UDP socket and everything its reader
// goroutine needs to read a batch with recvmmsg and answer the hits with
// sendmmsg without allocating. All fields except conn and local belong to
// the reader goroutine; miss goroutines only use rc (sendto) and metrics.
type udpSocket struct {
	s     *Server
	conn  *net.UDPConn
	rc    syscall.RawConn
	local string

	// Read side: message i reads into rbuf[i*maxUDPRequest:] and its
	// source address into names[i].
	rhdr  []unix.Mmsghdr
	riov  []unix.Iovec
	names []unix.RawSockaddrInet6
	rbuf  []byte
	// ctrl receives the arrival stamp of a batch's first message; nil
	// when the socket does not stamp datagrams. win acts on it (shed.go).
	ctrl []byte
	win  delayWindow

	// Write side: the hits of one batch are copied into arena (never
	// grown, so the iovecs stay valid) and sent with one sendmmsg.
	whdr    []unix.Mmsghdr
	wiov    []unix.Iovec
	arena   []byte
	pending int

	// scratch is the dst of ServeFast (capacity maxMessage per contract).
	scratch []byte

	// talk counts this socket's queries per source (top talkers); nil
	// when off.
	talk *talkers

	// Results of the last syscall, set inside the RawConn callbacks that
	// are built once (method values) so that calling them allocates nothing.
	readFn, writeFn func(fd uintptr) bool
	rerr            syscall.Errno
	reads           int // recvmmsg calls, for tests
	wfrom, wsent    int
	werr            syscall.Errno
}

// arenaPerMessage sizes the write arena: most answers fit, and a batch
// whose answers do not is flushed early rather than grown.
const arenaPerMessage = 1232

func newUDPSocket(s *Server, c *net.UDPConn) (*udpSocket, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp %s: %w", c.LocalAddr(), err)
	}
	if err := c.SetReadBuffer(s.cfg.ReadBuffer); err != nil {
		return nil, fmt.Errorf("udp %s: receive buffer: %w", c.LocalAddr(), err)
	}
	n := s.cfg.BatchSize
	u := &udpSocket{
		s:       s,
		conn:    c,
		rc:      rc,
		local:   c.LocalAddr().String(),
		rhdr:    make([]unix.Mmsghdr, n),
		riov:    make([]unix.Iovec, n),
		names:   make([]unix.RawSockaddrInet6, n),
		rbuf:    make([]byte, n*maxUDPRequest),
		whdr:    make([]unix.Mmsghdr, n),
		wiov:    make([]unix.Iovec, n),
		arena:   make([]byte, 0, n*arenaPerMessage),
		scratch: make([]byte, 0, maxMessage),
	}
	if s.obs != nil {
		u.talk = s.obs.newTalkers()
	}
	if err := enableStamps(rc); err != nil {
		// Queue delay is then neither measured nor acted on; every
		// query is still answered.
		s.log.Warn("udp: datagrams are not stamped on arrival; queue-delay shedding is off for this socket",
			zap.String("addr", u.local), zap.Error(err))
	} else {
		u.ctrl = make([]byte, stampCtrlLen)
		u.rhdr[0].Hdr.Control = &u.ctrl[0]
		u.rhdr[0].Hdr.SetControllen(stampCtrlLen)
	}
	for i := range n {
		u.riov[i].Base = &u.rbuf[i*maxUDPRequest]
		u.riov[i].SetLen(maxUDPRequest)
		h := &u.rhdr[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&u.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &u.riov[i]
		h.SetIovlen(1)
		u.whdr[i].Hdr.Iov = &u.wiov[i]
		u.whdr[i].Hdr.SetIovlen(1)
	}
	u.readFn = u.read
	u.writeFn = u.sendmmsg
	return u, nil
}

// read is the reader's RawConn callback: it reads batches with recvmmsg
// and answers each (handleBatch) until the socket's queue is empty, then
// returns false so that the runtime poller waits for the next datagram.
// It returns true only with an error (rerr) or once the server stops.
//
// A batch shorter than the read slots means the queue was empty when the
// kernel filled it, so the reader waits at once instead of making the
// recvmmsg that would return EAGAIN: at ordinary rates, about one datagram
// a wake-up, that call was a third of the reader's system calls. This is
// safe only inside one RawConn.Read: the poller's epoll is edge-triggered,
// and a datagram queued after the short read marks the descriptor ready,
// which the wait then sees; a new Read starts by clearing that mark
// (internal/poll's prepareRead), so a reader that returned after a short
// batch and skipped the read of its next call would leave such a datagram
// queued until another one came.
//
// MSG_DONTWAIT calls never block, so they bypass the runtime's syscall
// bookkeeping (RawSyscall6): with Syscall6, every call marks the P as in a
// syscall, which makes sysmon poll, wake and hand the P off to another
// thread during the longer sendmmsg calls. That churn cost about 2% of the
// server's CPU at saturation with GOMAXPROCS=1. The longest call (a full
// batch) takes tens of microseconds, which bounds the delay it adds to a
// stop-the-world pause.
func (u *udpSocket) read(fd uintptr) bool {
	for !u.s.stopping.Load() {
		u.reads++
		n, err, ok := mmsg(unix.SYS_RECVMMSG, fd, u.rhdr)
		if !ok {
			return false
		}
		if err != 0 {
			u.rerr = err
			return true
		}
		u.handleBatch(n)
		if n < len(u.rhdr) {
			return false
		}
	}
	return true
}

// sendmmsg sends whdr[wfrom:pending]; false waits until writable.
func (u *udpSocket) sendmmsg(fd uintptr) bool {
	n, err, ok := mmsg(unix.SYS_SENDMMSG, fd, u.whdr[u.wfrom:u.pending])
	u.wsent, u.werr = n, err
	return ok
}

// mmsg makes one non-blocking recvmmsg or sendmmsg (trap) over hdr and
// returns the number of messages done and the error; ok is false when the
// socket is not ready (EAGAIN) and the caller should wait for the poller.
func mmsg(trap, fd uintptr, hdr []unix.Mmsghdr) (n int, err syscall.Errno, ok bool) {
	for {
		r, _, e := unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&hdr[0])),
			uintptr(len(hdr)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(r), 0, true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, 0, false
		default:
			return 0, e, true
		}
	}
}

// serve is the socket's reader goroutine.
func (u *udpSocket) serve() {
	s := u.s
	defer s.readers.Done()
	for {
		u.rerr = 0
		err := u.rc.Read(u.readFn)
		if s.stopping.Load() || errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.m.udpReadErr.Inc()
			s.log.Debug("udp read", zap.String("addr", u.local), zap.Error(err))
			continue
		}
		if u.rerr != 0 {
			s.m.udpReadErr.Inc()
			if ce := s.log.Check(zap.DebugLevel, "udp read"); ce != nil {
				ce.Write(zap.String("addr", u.local), zap.Error(u.rerr))
			}
		}
	}
}

// handleBatch answers the n datagrams just read: hits and refusals go out
// in one sendmmsg at the end, misses on goroutines of their own.
func (u *udpSocket) handleBatch(n int) {
	s := u.s
	s.m.udpIn.Add(n)
	s.m.batch.Update(float64(n))
	if u.ctrl != nil {
		u.observeDelay()
	}
	u.arena, u.pending = u.arena[:0], 0
	obs := s.obs // nil unless the query log or the top talkers are on
	if obs != nil && u.talk != nil {
		// One lock a batch; this socket's misses wait for it to end.
		u.talk.mu.Lock()
	}
	for i := range n {
		h := &u.rhdr[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 || h.Len < headerLen {
			s.m.dropped.Inc()
			continue
		}
		off := i * maxUDPRequest
		req := u.rbuf[off : off+int(h.Len) : off+maxUDPRequest]
		if obs != nil {
			u.observed(obs, req, i)
			continue
		}
		if s.cfg.Sources != nil && !s.cfg.Sources.Allowed(udpSource(&u.names[i])) {
			s.m.udpDenied.Inc()
			u.queue(refused(u.scratch, req), i)
			continue
		}
		p := udpProto(&u.names[i])
		resp, ok := s.serveFast(u.scratch, req, p)
		if !ok {
			// Only a miss looks at its client's share.
			src := udpSource(&u.names[i])
			if dom, ok := s.acquire(src, req); ok {
				u.miss(req, i, src, dom, time.Time{})
			} else {
				u.queue(s.overloaded(u.scratch, req, p), i)
			}
		} else {
			u.queue(resp, i)
		}
	}
	if obs != nil && u.talk != nil {
		u.talk.mu.Unlock()
	}
	u.flush()
	// The kernel overwrote Namelen of the messages it filled; restore it
	// for the next read (it will refill only up to this many).
	for i := range n {
		u.rhdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6
	}
	if u.ctrl != nil {
		u.rhdr[0].Hdr.SetControllen(stampCtrlLen)
	}
}

// observed answers message i (req) as handleBatch does, and records it
// in the top talkers and, when sampled, in the query log. A miss is
// recorded once answered (runUDP). u.talk.mu is held.
func (u *udpSocket) observed(obs *observer, req []byte, i int) {
	s := u.s
	src := udpSource(&u.names[i])
	p := udpProto(&u.names[i])
	sampled := obs.sample()
	var start time.Time
	if sampled {
		start = time.Now()
	}
	var resp []byte
	a := answerHit
	if s.cfg.Sources != nil && !s.cfg.Sources.Allowed(src) {
		s.m.udpDenied.Inc()
		resp, a = refused(u.scratch, req), answerDenied
	} else if r, ok := s.serveFast(u.scratch, req, p); ok {
		resp = r
	} else if dom, ok := s.acquire(src, req); ok {
		u.miss(req, i, src, dom, start)
		return
	} else {
		resp, a = s.overloaded(u.scratch, req, p), answerOverload
	}
	obs.note(u.talk, false, src, p, req, resp, a, sampled, start)
	u.queue(resp, i)
}

// observeDelay records how long the batch's first datagram, the oldest
// of the queue it was read from, waited there, and hands it to the
// limit on misses in flight (shed.go).
func (u *udpSocket) observeDelay() {
	h := &u.rhdr[0].Hdr
	now := time.Now().UnixNano()
	d := queueDelay(now, arrival(u.ctrl[:min(int(h.Controllen), len(u.ctrl))]))
	if d < 0 {
		return
	}
	u.s.m.queueDelay.Update(float64(d) / 1e9)
	if u.s.cfg.ShedDelay > 0 {
		u.s.observeDelay(&u.win, now, d)
	}
}

// enableStamps has the kernel stamp each datagram of rc with its arrival
// time (SO_TIMESTAMPNS).
func enableStamps(rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("set SO_TIMESTAMPNS: %w", err)
	}
	return nil
}

// queue adds the answer to message i to the pending sendmmsg.
func (u *udpSocket) queue(resp []byte, i int) {
	if len(resp) == 0 {
		return
	}
	if len(resp) > cap(u.arena)-len(u.arena) {
		u.flush()
		if len(resp) > cap(u.arena) {
			u.sendOne(resp, i)
			return
		}
	}
	off := len(u.arena)
	u.arena = append(u.arena, resp...)
	p := u.pending
	u.wiov[p].Base = &u.arena[off]
	u.wiov[p].SetLen(len(resp))
	w := &u.whdr[p].Hdr
	w.Name = (*byte)(unsafe.Pointer(&u.names[i]))
	w.Namelen = u.rhdr[i].Hdr.Namelen
	u.pending++
}

// flush sends the pending answers, skipping over a message the kernel
// refuses so that one bad destination does not cost the rest.
func (u *udpSocket) flush() {
	s := u.s
	u.wfrom = 0
	for u.wfrom < u.pending {
		if err := u.rc.Write(u.writeFn); err != nil {
			s.m.udpWriteErr.Add(u.pending - u.wfrom)
			s.log.Debug("udp write", zap.String("addr", u.local), zap.Error(err))
			break
		}
		if u.werr != 0 {
			s.m.udpWriteErr.Inc()
			if ce := s.log.Check(zap.DebugLevel, "udp write"); ce != nil {
				ce.Write(zap.String("addr", u.local), zap.Error(u.werr))
			}
			u.wfrom++
			continue
		}
		s.m.udpOut.Add(u.wsent)
		u.wfrom += u.wsent
	}
	u.arena, u.pending = u.arena[:0], 0
}

// sendOne sends an answer too large for the arena on its own.
func (u *udpSocket) sendOne(resp []byte, i int) {
	var errno syscall.Errno
	name := u.names[i]
	namelen := u.rhdr[i].Hdr.Namelen
	err := u.rc.Write(func(fd uintptr) bool {
		errno = sendto(fd, resp, &name, namelen)
		return errno != unix.EAGAIN
	})
	u.s.countSend(u, err, errno)
}

func (s *Server) countSend(u *udpSocket, err error, errno syscall.Errno) {
	if err == nil && errno != 0 {
		err = errno
	}
	if err != nil {
		s.m.udpWriteErr.Inc()
		if ce := s.log.Check(zap.DebugLevel, "udp write"); ce != nil {
			ce.Write(zap.String("addr", u.local), zap.Error(err))
		}
		return
	}
	s.m.udpOut.Inc()
}

// sendto sends one datagram without blocking.
func sendto(fd uintptr, b []byte, name *unix.RawSockaddrInet6, namelen uint32) syscall.Errno {
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(name)), uintptr(namelen))
		if e != unix.EINTR {
			return e
		}
	}
}

// miss hands message i from src to a goroutine that resolves it and
// answers with sendto. The in-flight slot is already taken.
func (u *udpSocket) miss(req []byte, i int, src srcKey, dom domKey, start time.Time) {
	j := u.s.jobs.Get().(*missJob)
	j.u = u
	j.src, j.dom, j.start = src, dom, start
	j.req = append(j.req[:0], req...)
	j.name = u.names[i]
	j.namelen = u.rhdr[i].Hdr.Namelen
	u.s.misses.Add(1)
	go j.runUDP()
}

// missJob carries one miss; jobs are recycled through Server.jobs.
type missJob struct {
	s       *Server
	u       *udpSocket // UDP misses
	c       *tcpConn   // TCP misses
	src     srcKey     // the client, whose in-flight slot the job holds
	dom     domKey     // the question's domain, whose slot it holds too
	req     []byte
	dst     []byte
	name    unix.RawSockaddrInet6
	namelen uint32
	resp    []byte
	errno   syscall.Errno
	writeFn func(fd uintptr) bool
	// start is when a miss sampled for the query log was read; zero
	// when not sampled.
	start time.Time
}

// missBufSize is the starting capacity of a miss's request and response
// buffers; ServeSlow appends, so larger answers grow them.
const missBufSize = 1232

func newMissJob(s *Server) *missJob {
	j := &missJob{s: s, req: make([]byte, 0, missBufSize), dst: make([]byte, 0, missBufSize)}
	j.writeFn = j.sendto
	return j
}

func (j *missJob) sendto(fd uintptr) bool {
	j.errno = sendto(fd, j.resp, &j.name, j.namelen)
	return j.errno != unix.EAGAIN
}

func (j *missJob) runUDP() {
	s, u := j.s, j.u
	defer s.misses.Done()
	p := udpProto(&j.name)
	resp := s.serveSlow(j.dst, j.req, p, j.src)
	s.release(j.src, j.dom)
	if s.obs != nil {
		// Before the answer leaves, as for a hit: a client that got it
		// finds it counted.
		s.obs.note(u.talk, true, j.src, p, j.req, resp, answerMiss, !j.start.IsZero(), j.start)
	}
	if len(resp) > 0 {
		j.resp = resp
		err := u.rc.Write(j.writeFn)
		s.countSend(u, err, j.errno)
	}
	j.put()
}

// put returns j to the pool. The response is not kept: it may have grown
// past what is worth pooling.
func (j *missJob) put() {
	if cap(j.req) > 4*missBufSize {
		j.req = make([]byte, 0, missBufSize)
	}
	j.u, j.c, j.resp, j.errno, j.start = nil, nil, nil, 0, time.Time{}
	j.dst = j.dst[:0]
	j.s.jobs.Put(j)
}
