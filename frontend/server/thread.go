package server

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The thread reader (Config.Reader = ReaderThread) waits for datagrams on
// an OS thread of its own, blocked in ppoll, instead of in the runtime's
// poller. At ordinary rates, about one datagram a wake-up, the poller's way
// costs the scheduler's work on every wake-up besides the system calls:
// the netpoll wait, finding the reader runnable, handing it a P. Blocked in
// ppoll, the kernel wakes the reader's thread itself, and the reader reads
// on. Its sockets must not stay registered with the runtime's epoll, or
// every datagram would also wake the thread waiting there: each socket is a
// descriptor of its own (rawFD), duplicated from the one package net made
// and which is then closed.
//
// Each reader thread serves one socket of every listen address (the k-th
// of each), so there are as many as UDP sockets per address. A reader's
// P stays with it while it waits in ppoll until sysmon takes it away, so
// every other goroutine (misses, timers, the collector) needs a P more than
// the readers: StartContext raises GOMAXPROCS to one more than the reader
// threads when it is lower.

// threadYield is how often a reader thread calls runtime.Gosched. A reader
// that never parks keeps its P's schedtick for ever; sysmon's retake then
// takes the P from it in every system call it finds it in (after
// forcePreemptNS, 10 ms, on one schedtick), and each return from ppoll
// has to get a P back: about one context switch more per query
// (tools/readerbench measured it). Gosched moves the schedtick.
const threadYield = 5 * time.Millisecond

// writeWait bounds how long a write waits for a full send buffer to drain
// when the socket is not the runtime poller's.
const writeWait = time.Second

var errWriteTimeout = errors.New("send buffer full for " + writeWait.String())

// rawFD is a socket descriptor that the runtime's poller does not know,
// with the reference counting that package net gives its own: Close marks
// it closed, and the descriptor is closed once no Control runs, so that a
// miss sending on it never writes to a descriptor number reused meanwhile.
type rawFD struct {
	fd    int
	state atomic.Int64 // 2 × references | 1 once Close was called
}

// Control runs fn with the descriptor, which stays open until fn returns;
// net.ErrClosed after Close. It implements the part of syscall.RawConn
// that the thread reader uses.
func (r *rawFD) Control(fn func(fd uintptr)) error {
	for {
		s := r.state.Load()
		if s&1 != 0 {
			return net.ErrClosed
		}
		if r.state.CompareAndSwap(s, s+2) {
			break
		}
	}
	defer r.decref()
	fn(uintptr(r.fd))
	return nil
}

func (r *rawFD) decref() {
	if r.state.Add(-2) == 1 {
		_ = unix.Close(r.fd)
	}
}

// Close closes the descriptor now, or once the last Control returns.
func (r *rawFD) Close() error {
	for {
		s := r.state.Load()
		if s&1 != 0 {
			return net.ErrClosed
		}
		if r.state.CompareAndSwap(s, s|1) {
			if s == 0 {
				return unix.Close(r.fd)
			}
			return nil
		}
	}
}

// detach returns a descriptor of c's socket that the runtime's poller does
// not know, and closes c, which removes c's descriptor from the poller.
func detach(c *net.UDPConn) (*rawFD, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup: %w", derr)
	}
	_ = c.Close()
	return &rawFD{fd: nfd}, nil
}

// waitWritable waits until fd can take a datagram, for at most writeWait.
func waitWritable(fd int) error {
	deadline := time.Now().Add(writeWait)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errWriteTimeout
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
}

// threadReaders groups the UDP sockets for the reader threads: the k-th
// socket of every address goes to thread k mod n.
func threadReaders(socks []*udpSocket, n int) [][]*udpSocket {
	groups := make([][]*udpSocket, n)
	for _, u := range socks {
		k := u.slot % n
		groups[k] = append(groups[k], u)
	}
	return groups
}

// startThreads starts one reader thread per group, first raising
// GOMAXPROCS so that a P is left for everything else.
func (s *Server) startThreads() error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("thread reader: eventfd: %w", err)
	}
	s.stopFD = efd
	groups := threadReaders(s.udp, s.cfg.UDPSockets)
	if want := len(groups) + 1; runtime.GOMAXPROCS(0) < want {
		s.log.Info("thread reader: raising GOMAXPROCS to one more than the reader threads",
			zap.Int("from", runtime.GOMAXPROCS(0)), zap.Int("to", want))
		runtime.GOMAXPROCS(want)
	}
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		s.readers.Add(1)
		s.threads.Add(1)
		go s.serveThread(g)
	}
	return nil
}

// stopThreads wakes every reader thread to stop. StopReading calls it.
func (s *Server) stopThreads() {
	if s.stopFD < 0 {
		return
	}
	one := [8]byte{1}
	if _, err := unix.Write(s.stopFD, one[:]); err != nil {
		s.log.Error("thread reader: cannot wake the readers to stop", zap.Error(err))
	}
}

// closeStopFD closes the eventfd once every reader thread has returned.
func (s *Server) closeStopFD() {
	if s.stopFD < 0 {
		return
	}
	s.threads.Wait()
	_ = unix.Close(s.stopFD)
	s.stopFD = -1
}

// serveThread is one reader thread: it holds the descriptors of its
// sockets for as long as it runs.
func (s *Server) serveThread(socks []*udpSocket) {
	defer s.readers.Done()
	defer s.threads.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := withFDs(socks, nil, func(fds []int) { s.threadLoop(socks, fds) }); err != nil {
		s.log.Debug("thread reader", zap.Error(err))
	}
}

// withFDs calls fn with the descriptors of socks, each held open (Control)
// while fn runs.
func withFDs(socks []*udpSocket, fds []int, fn func([]int)) error {
	if len(socks) == 0 {
		fn(fds)
		return nil
	}
	var err error
	if cerr := socks[0].raw.Control(func(fd uintptr) {
		err = withFDs(socks[1:], append(fds, int(fd)), fn)
	}); cerr != nil {
		return cerr
	}
	return err
}

// threadLoop waits in ppoll for any of fds or the stop eventfd and reads
// every ready socket until its queue is empty (udpSocket.read), until the
// server stops reading.
func (s *Server) threadLoop(socks []*udpSocket, fds []int) {
	pfds := make([]unix.PollFd, len(fds)+1)
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	stop := len(fds)
	pfds[stop] = unix.PollFd{Fd: int32(s.stopFD), Events: unix.POLLIN}
	lastYield := time.Now()
	for !s.stopping.Load() {
		// unix.Ppoll is a blocking system call (Syscall6): the runtime
		// may give the P to another thread while the reader waits.
		_, err := unix.Ppoll(pfds, nil, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Not expected (EFAULT, EINVAL, ENOMEM): count it and try
			// again after a pause rather than leave the sockets unread.
			s.m.udpReadErr.Inc()
			s.log.Error("thread reader: ppoll", zap.Error(err))
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if pfds[stop].Revents != 0 {
			return
		}
		if now := time.Now(); now.Sub(lastYield) >= threadYield {
			lastYield = now
			runtime.Gosched()
		}
		for i, u := range socks {
			if pfds[i].Revents == 0 {
				continue
			}
			u.rerr = 0
			u.read(uintptr(fds[i]))
			if u.rerr != 0 {
				u.readError(u.rerr)
			}
		}
	}
}

// writeRaw is udpSocket.write for a socket of the thread reader: fn is
// tried again each time the socket can take a datagram, for at most
// writeWait.
func (u *udpSocket) writeRaw(fn func(fd uintptr) bool) error {
	var werr error
	if err := u.raw.Control(func(fd uintptr) {
		for !fn(fd) {
			if werr = waitWritable(int(fd)); werr != nil {
				return
			}
		}
	}); err != nil {
		return err
	}
	return werr
}
