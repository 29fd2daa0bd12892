// Command readerbench measures how a UDP reader should wait for datagrams.
// It is a measurement prototype, not used by the frontend: a minimal
// responder that answers every query by echoing it with QR and RA set, so
// that what it costs per query is the reader's I/O path and nothing else.
// -mode selects the way its one reader waits:
//
//	poller          the frontend's way (frontend/server/udp.go): a
//	                RawConn.Read callback makes non-blocking recvmmsg and
//	                sendmmsg through RawSyscall6 and returns to the
//	                runtime's poller after a short batch. GOMAXPROCS=1.
//	thread          the reader is locked to its OS thread and waits in
//	                ppoll (Syscall6) on a socket the runtime's poller does
//	                not know and on an eventfd that stops it, then reads
//	                batches until a short one. GOMAXPROCS=2.
//	thread-netpoll  thread on a socket from net.ListenConfig, which stays
//	                registered with the runtime's epoll. GOMAXPROCS=2.
//	blocking        the reader is locked to its OS thread and blocks in
//	                recvmmsg MSG_WAITFORONE (Syscall6) on a blocking
//	                socket; nothing can wake it to stop. GOMAXPROCS=2.
//
// With a locked reader the second P runs everything but the reader, whose
// P is in a system call most of the time. Every mode runs a
// 1 ms ticker, standing for the frontend's timers, misses and scrapes: its
// rate shows whether such work still runs beside the reader. SIGUSR1
// prints the ticks per second since the last signal and the answers sent;
// SIGTERM or SIGINT prints them, then the runtime's stop-the-world pause
// distributions, and stops the reader.
//
// run.sh beside this file runs the modes and unbound under dnsperf
// (README.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	batch  = 32  // datagrams per recvmmsg and sendmmsg
	maxReq = 512 // bytes read per datagram; longer ones are dropped (MSG_TRUNC)
)

var (
	mode    = flag.String("mode", "poller", "poller, thread, thread-netpoll or blocking")
	addr    = flag.String("addr", "127.0.0.1:15470", "UDP address to listen on (IPv4)")
	gcEvery = flag.Duration("gc", 0, "force a collection at this interval (0: never)")
	yield   = flag.Duration("yield", 5*time.Millisecond, "thread, thread-netpoll and blocking: call runtime.Gosched this often (0: never); see yielder")
	procs   = flag.Int("procs", 0, "GOMAXPROCS (0: 1 for poller, 2 for the others)")

	ticks    atomic.Int64 // of the 1 ms ticker
	answered atomic.Int64 // datagrams sent
	stopping atomic.Bool
)

// batchBufs holds one reader's mmsg headers and buffers: message i reads
// into buf[i*maxReq:] and its source address into names[i].
type batchBufs struct {
	rhdr  []unix.Mmsghdr
	riov  []unix.Iovec
	whdr  []unix.Mmsghdr
	wiov  []unix.Iovec
	names []unix.RawSockaddrInet6
	buf   []byte
}

func newBufs() *batchBufs {
	b := &batchBufs{
		rhdr:  make([]unix.Mmsghdr, batch),
		riov:  make([]unix.Iovec, batch),
		whdr:  make([]unix.Mmsghdr, batch),
		wiov:  make([]unix.Iovec, batch),
		names: make([]unix.RawSockaddrInet6, batch),
		buf:   make([]byte, batch*maxReq),
	}
	for i := range batch {
		b.riov[i].Base = &b.buf[i*maxReq]
		b.riov[i].SetLen(maxReq)
		h := &b.rhdr[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &b.riov[i]
		h.SetIovlen(1)
		b.whdr[i].Hdr.Iov = &b.wiov[i]
		b.whdr[i].Hdr.SetIovlen(1)
	}
	return b
}

// answer turns the n datagrams just read into answers in place (the
// responder does no DNS work) and queues them in whdr; it returns how many
// it queued.
func (b *batchBufs) answer(n int) int {
	p := 0
	for i := range n {
		h := &b.rhdr[i]
		l := int(h.Len)
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 || l < 12 {
			continue
		}
		m := b.buf[i*maxReq : i*maxReq+l]
		m[2] |= 0x80 // QR
		m[3] |= 0x80 // RA
		b.wiov[p].Base = &m[0]
		b.wiov[p].SetLen(l)
		w := &b.whdr[p].Hdr
		w.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		w.Namelen = h.Hdr.Namelen
		p++
	}
	// The kernel overwrote Namelen of the messages it filled.
	for i := range n {
		b.rhdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6
	}
	return p
}

// mmsg makes one non-blocking recvmmsg or sendmmsg (trap) over hdr without
// the runtime's system-call bookkeeping, as the frontend does. ok is false
// on EAGAIN.
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

// sendAll sends whdr[:p]. A message the kernel refuses is skipped; EAGAIN
// drops the rest of the batch (a full send buffer on loopback means the
// client is not reading).
func (b *batchBufs) sendAll(fd uintptr, p int) {
	for from := 0; from < p; {
		n, e, ok := mmsg(unix.SYS_SENDMMSG, fd, b.whdr[from:p])
		if !ok {
			return
		}
		if e != 0 {
			from++
			continue
		}
		answered.Add(int64(n))
		from += n
	}
}

// drain reads and answers batches until a short one (the queue was empty
// when the kernel filled it), EAGAIN or an error.
func (b *batchBufs) drain(fd uintptr) error {
	for {
		n, e, ok := mmsg(unix.SYS_RECVMMSG, fd, b.rhdr)
		if !ok {
			return nil
		}
		if e != 0 {
			return fmt.Errorf("recvmmsg: %w", e)
		}
		if p := b.answer(n); p > 0 {
			b.sendAll(fd, p)
		}
		if n < batch {
			return nil
		}
	}
}

// servePoller is the frontend's reader: all batches are read inside one
// RawConn.Read callback, which returns false to wait in the poller after a
// short batch (frontend/server/udp.go, read, says why within one Read).
func servePoller(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	b := newBufs()
	var rerr error
	read := func(fd uintptr) bool {
		for !stopping.Load() {
			n, e, ok := mmsg(unix.SYS_RECVMMSG, fd, b.rhdr)
			if !ok {
				return false
			}
			if e != 0 {
				rerr = fmt.Errorf("recvmmsg: %w", e)
				return true
			}
			if p := b.answer(n); p > 0 {
				b.sendAll(fd, p)
			}
			if n < batch {
				return false
			}
		}
		return true
	}
	for !stopping.Load() && rerr == nil {
		if err := rc.Read(read); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
	}
	return rerr
}

// yielder calls runtime.Gosched once every -yield, from a reader that
// otherwise never parks. Such a reader keeps one schedtick for ever, so
// sysmon's retake (runtime/proc.go) finds its P on the same schedtick for
// longer than forcePreemptNS (10 ms) and takes it away in every system
// call it finds the reader in, one sysmon tick (20 us) into the call; the
// reader's exitsyscall then has to get a P back and sysmon is woken again:
// about one context switch more per query. Gosched puts the reader back
// through execute(), which moves the schedtick.
type yielder struct{ last time.Time }

func (y *yielder) maybe() {
	if *yield <= 0 {
		return
	}
	if now := time.Now(); now.Sub(y.last) >= *yield {
		y.last = now
		runtime.Gosched()
	}
}

// serveThread waits in ppoll on fd and on efd, which stops it once
// readable, and drains fd after each wake-up.
func serveThread(fd, efd int) error {
	runtime.LockOSThread()
	b := newBufs()
	var y yielder
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
	for {
		// A blocking call: unix.Ppoll goes through Syscall6, so that the
		// runtime may hand the P to another thread while it waits.
		_, err := unix.Ppoll(fds, nil, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("ppoll: %w", err)
		}
		if fds[1].Revents != 0 {
			return nil
		}
		y.maybe()
		if err := b.drain(uintptr(fd)); err != nil {
			return err
		}
	}
}

// serveBlocking blocks in recvmmsg until a datagram comes and takes what
// else is queued with it (MSG_WAITFORONE). It never returns unless the
// call fails: a reader blocked there has no wake-up that leaves a socket
// shared with another process usable (shutdown(2) acts on the socket, not
// on one holder of it), so the process exits under it.
func serveBlocking(fd int) error {
	runtime.LockOSThread()
	b := newBufs()
	var y yielder
	for {
		y.maybe()
		r, _, e := syscall.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.rhdr[0])),
			batch, unix.MSG_WAITFORONE, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("recvmmsg: %w", e)
		}
		if p := b.answer(int(r)); p > 0 {
			b.sendAll(uintptr(fd), p)
		}
	}
}

// rawSocket makes a UDP socket that the runtime's poller does not know. A
// socket from package net is registered with the runtime's epoll
// (edge-triggered), so every datagram would also wake the thread waiting
// in netpoll, for nothing when the reader waits elsewhere (thread-netpoll
// measures that).
func rawSocket(ua *net.UDPAddr, nonblock bool) (int, error) {
	ip := ua.IP.To4()
	if ip == nil {
		return -1, fmt.Errorf("%s: not an IPv4 address", ua)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	err = errors.Join(
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1),
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20),
		unix.Bind(fd, &unix.SockaddrInet4{Port: ua.Port, Addr: [4]byte(ip)}),
		unix.SetNonblock(fd, nonblock),
	)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("udp %s: %w", ua, err)
	}
	return fd, nil
}

// listen opens the socket of package net that poller and thread-netpoll
// read, with the frontend's options (SO_REUSEPORT, 4 MiB receive buffer).
func listen() (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(nil, "udp4", *addr)
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	if err := c.SetReadBuffer(4 << 20); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "readerbench: no arguments expected")
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "readerbench:", err)
		os.Exit(1)
	}
}

func run() error {
	procs := *procs
	if procs <= 0 {
		procs = 2
		if *mode == "poller" {
			procs = 1
		}
	}
	runtime.GOMAXPROCS(procs)
	ua, err := net.ResolveUDPAddr("udp4", *addr)
	if err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}

	var conn *net.UDPConn // poller and thread-netpoll
	var serve func() error
	switch *mode {
	case "poller":
		if conn, err = listen(); err != nil {
			return err
		}
		serve = func() error { return servePoller(conn) }
	case "thread-netpoll":
		if conn, err = listen(); err != nil {
			return err
		}
		rc, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var fd int
		if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
			return err
		}
		serve = func() error {
			// The reader uses fd alone: keep conn, whose finalizer
			// would close it, reachable while it does.
			defer runtime.KeepAlive(conn)
			return serveThread(fd, efd)
		}
	case "thread":
		fd, err := rawSocket(ua, true)
		if err != nil {
			return err
		}
		serve = func() error { return serveThread(fd, efd) }
	case "blocking":
		fd, err := rawSocket(ua, false)
		if err != nil {
			return err
		}
		serve = func() error { return serveBlocking(fd) }
	default:
		return fmt.Errorf("unknown -mode %q", *mode)
	}

	done := make(chan error, 1)
	go func() { done <- serve() }()
	go func() {
		for range time.Tick(time.Millisecond) {
			ticks.Add(1)
		}
	}()
	if *gcEvery > 0 {
		go func() {
			for range time.Tick(*gcEvery) {
				runtime.GC()
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "pid %d mode %s GOMAXPROCS %d addr %s\n", os.Getpid(), *mode, procs, *addr)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	last, lastT := int64(0), time.Now()
wait:
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("returned")
			}
			return fmt.Errorf("reader stopped early: %w", err)
		case s := <-sig:
			now := time.Now()
			tk := ticks.Load()
			fmt.Printf("ticks %d in %.3fs = %.1f/s; answered %d\n", tk-last, now.Sub(lastT).Seconds(),
				float64(tk-last)/now.Sub(lastT).Seconds(), answered.Load())
			last, lastT = tk, now
			if s != syscall.SIGUSR1 {
				break wait
			}
		}
	}
	printPauses()

	// The poller reader returns once its socket is closed, the thread
	// readers once the eventfd is readable (thread-netpoll's socket stays
	// open until then: the reader may be reading it); the blocking one
	// stays in recvmmsg and the process exits under it.
	if *mode == "blocking" {
		fmt.Println("reader left in recvmmsg (no wake-up); exiting")
		return nil
	}
	stopping.Store(true)
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if *mode == "poller" {
		conn.Close()
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		fmt.Println("reader stopped")
		return nil
	case <-time.After(time.Second):
		return errors.New("reader did not stop within 1s")
	}
}

// printPauses prints the runtime's stop-the-world distributions: the time
// to stop the world (which a thread in a system call that does not give
// up its P lengthens) and the whole pause, for collections and for other
// stops.
func printPauses() {
	names := []string{"/sched/pauses/stopping/gc:seconds", "/sched/pauses/total/gc:seconds",
		"/sched/pauses/stopping/other:seconds", "/gc/cycles/total:gc-cycles"}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	for _, x := range s {
		switch x.Value.Kind() {
		case metrics.KindUint64:
			fmt.Printf("%s %d\n", x.Name, x.Value.Uint64())
		case metrics.KindFloat64Histogram:
			h := x.Value.Float64Histogram()
			var tot uint64
			for _, c := range h.Counts {
				tot += c
			}
			if tot == 0 {
				fmt.Printf("%s n=0\n", x.Name)
				continue
			}
			fmt.Printf("%s n=%d p50<=%.1fus p99<=%.1fus max<=%.1fus\n", x.Name, tot,
				quantile(h, tot, 0.5)*1e6, quantile(h, tot, 0.99)*1e6, quantile(h, tot, 1)*1e6)
		}
	}
}

// quantile returns the upper bound of the bucket that holds the q-quantile
// of h, whose counts sum to tot.
func quantile(h *metrics.Float64Histogram, tot uint64, q float64) float64 {
	want := max(uint64(q*float64(tot)+0.5), 1)
	var acc uint64
	for i, c := range h.Counts {
		acc += c
		if acc >= want {
			return h.Buckets[i+1]
		}
	}
	return h.Buckets[len(h.Buckets)-1]
}
