package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// pollerInodes returns the inodes of the files registered with any epoll
// instance of this process (the runtime's poller is one), from the "tfd:"
// lines of /proc/self/fdinfo.
func pollerInodes(t *testing.T) map[uint64]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	inos := map[uint64]bool{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "tfd:") {
				continue
			}
			// "tfd: 7 events: 8000201d data: ... pos:0 ino:1d3a sdev:8"
			for _, f := range strings.Fields(line) {
				if h, ok := strings.CutPrefix(f, "ino:"); ok {
					if ino, err := strconv.ParseUint(h, 16, 64); err == nil {
						inos[ino] = true
					}
				}
			}
		}
	}
	return inos
}

// socketInode returns the inode of u's socket.
func socketInode(t *testing.T, u *udpSocket) uint64 {
	t.Helper()
	var st unix.Stat_t
	var serr error
	ctl := func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }
	var err error
	if u.raw != nil {
		err = u.raw.Control(ctl)
	} else {
		err = u.rc.Control(ctl)
	}
	if err = errors.Join(err, serr); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestThreadReaderSocketsNotInPoller: the thread reader's sockets are not
// registered with the runtime's epoll, which would wake its netpoll thread
// for every datagram; the poller reader's are (the check can fail).
func TestThreadReaderSocketsNotInPoller(t *testing.T) {
	for _, tc := range []struct {
		reader     string
		registered bool
	}{{ReaderPoller, true}, {ReaderThread, false}} {
		t.Run(tc.reader, func(t *testing.T) {
			s, _ := startServer(t, Config{UDPSockets: 2, Reader: tc.reader}, &fakeHandler{})
			mustExchange(t, "udp", s.Addrs()[0], "hit.poller.")
			inos := pollerInodes(t)
			for _, u := range s.udp {
				if got := inos[socketInode(t, u)]; got != tc.registered {
					t.Errorf("%s socket %s registered with epoll: %v, want %v", tc.reader, u.local, got, tc.registered)
				}
			}
		})
	}
}

// TestThreadReaderServes: hits, misses (answered from their goroutines
// through the socket's reference-counted descriptor) and TCP, on two
// addresses served by the same reader threads.
func TestThreadReaderServes(t *testing.T) {
	s, set := startServer(t, Config{Listen: []string{"127.0.0.1:0", "[::1]:0"}, UDPSockets: 2, Reader: ReaderThread}, &fakeHandler{})
	for _, addr := range s.Addrs() {
		for i := range 20 {
			for _, name := range []string{"hit", "miss"} {
				q := fmt.Sprintf("%s%d.thread.", name, i)
				if m := mustExchange(t, "udp", addr, q); m.Question[0].Name != q {
					t.Fatalf("%s: answer for %s", q, m.Question[0].Name)
				}
			}
		}
		mustExchange(t, "tcp", addr, "miss.tcp.thread.")
	}
	if got := metricstest.Value(t, set, udpOut); got != 80 {
		t.Errorf("udp answers sent = %v, want 80", got)
	}
}

// TestThreadReaderGOMAXPROCS: with fewer Ps than reader threads plus one,
// the reader raises GOMAXPROCS, so that misses and timers never wait for
// sysmon to take a P from a reader blocked in ppoll.
func TestThreadReaderGOMAXPROCS(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	s, _ := startServer(t, Config{UDPSockets: 2, Reader: ReaderThread}, &fakeHandler{})
	if got := runtime.GOMAXPROCS(0); got < 3 {
		t.Errorf("GOMAXPROCS = %d with 2 reader threads, want at least 3", got)
	}
	// A timer fires on time while the readers wait.
	mustExchange(t, "udp", s.Addrs()[0], "miss.gomaxprocs.")
	start := time.Now()
	time.Sleep(time.Millisecond)
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("1ms sleep took %v beside the reader threads", d)
	}
}

// TestHandoverBetweenReaders: a server of either reader hands its sockets
// to one of the other while a client queries without pause; every query
// is answered (the old one stops reading, queries wait in the socket for
// the new one).
func TestHandoverBetweenReaders(t *testing.T) {
	for _, tc := range [][2]string{{ReaderPoller, ReaderThread}, {ReaderThread, ReaderPoller}} {
		t.Run(tc[0]+"-to-"+tc[1], func(t *testing.T) {
			old, _ := startServer(t, Config{UDPSockets: 2, Reader: tc[0]}, &fakeHandler{})
			addr := old.Addrs()[0]
			var stop atomic.Bool
			var answered, lost atomic.Int64
			var wg sync.WaitGroup
			for c := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := net.Dial("udp", addr)
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Close()
					for i := 0; !stop.Load(); i++ {
						kind := "hit"
						if i%4 == 0 {
							kind = "miss"
						}
						if _, err := udpQuery(conn, fmt.Sprintf("%s%d-%d.handover.", kind, c, i)); err != nil {
							lost.Add(1)
							continue
						}
						answered.Add(1)
					}
				}()
			}
			time.Sleep(200 * time.Millisecond)
			files, err := old.Files()
			if err != nil {
				t.Fatal(err)
			}
			s, _ := startServer(t, Config{Listen: []string{addr}, UDPSockets: 2, Reader: tc[1], Inherited: files}, &fakeHandler{})
			before := answered.Load()
			old.StopReading()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := old.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			after := answered.Load() - before
			t.Logf("%d answered, %d after the handover, %d lost", answered.Load(), after, lost.Load())
			if lost.Load() != 0 {
				t.Errorf("%d queries unanswered across the handover", lost.Load())
			}
			if after == 0 {
				t.Error("no query answered after the handover")
			}
			mustExchange(t, "tcp", s.Addrs()[0], "miss.after.")
		})
	}
}

// TestRawFDClose: Close during a Control defers closing the descriptor
// until the Control returns; after Close, Control fails.
func TestRawFDClose(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawFD{fd: fd}
	open := func() bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err == nil
	}
	if err := r.Control(func(uintptr) {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if !open() {
			t.Error("descriptor closed while a Control runs")
		}
	}); err != nil {
		t.Fatal(err)
	}
	if open() {
		t.Error("descriptor still open after the last Control")
	}
	if err := r.Control(func(uintptr) { t.Error("Control ran after Close") }); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Control after Close: %v, want net.ErrClosed", err)
	}
	if err := r.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
}

// TestThreadReaderShutdownReleasesPort: after Shutdown no descriptor of
// the thread reader's sockets stays open, so the port can be bound again
// without SO_REUSEPORT.
func TestThreadReaderShutdownReleasesPort(t *testing.T) {
	s, _ := startServer(t, Config{UDPSockets: 2, Reader: ReaderThread}, &fakeHandler{})
	addr := s.Addrs()[0]
	mustExchange(t, "udp", addr, "miss.release.")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("bind %s after Shutdown: %v", addr, err)
	}
	c.Close()
}
