package holder

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics"
)

// echoHandler answers every query as its own echo and counts them.
type echoHandler struct{ served atomic.Int64 }

func (h *echoHandler) ServeFast(dst, req []byte, _ server.Proto) ([]byte, bool) {
	h.served.Add(1)
	dst = append(dst[:0], req...)
	dst[2] |= 0x80
	return dst, true
}

func (h *echoHandler) ServeSlow(_ context.Context, dst, req []byte, p server.Proto) []byte {
	resp, _ := h.ServeFast(dst, req, p)
	return resp
}

func (h *echoHandler) Overloaded(dst, req []byte, _ server.Proto) []byte { return nil }

// frontend is an in-process stand-in for a frontend: a server and its
// Supplier. die ends it as SIGKILL would: the sockets closed (the
// holder's copies stay open), the lease ended without a release.
type frontend struct {
	srv    *server.Server
	h      *echoHandler
	sup    *Supplier
	cancel context.CancelFunc
	done   chan struct{}
}

// startFrontend takes the held sockets from the holder in dir (if any),
// serves listen with them and supplies the holder.
func startFrontend(t *testing.T, dir string, listen []string) *frontend {
	t.Helper()
	sup := NewSupplier(dir, listen, zaptest.NewLogger(t).Named("supplier"))
	return serveFrontend(t, sup, listen, take(t, sup))
}

// take takes the held sockets, waiting while the holder has not yet seen
// the end of the last frontend (die returns before it has).
func take(t *testing.T, sup *Supplier) []*os.File {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		files, err := sup.Take(context.Background())
		if errors.Is(err, ErrBusy) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		return files
	}
}

// waitFree waits until no frontend holds h's lease.
func waitFree(t *testing.T, h *Holder) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for h.leased() {
		if time.Now().After(deadline) {
			t.Fatal("the holder's lease is still held 2s after its frontend died")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func serveFrontend(t *testing.T, sup *Supplier, listen []string, files []*os.File) *frontend {
	t.Helper()
	f := &frontend{h: &echoHandler{}, sup: sup, done: make(chan struct{})}
	srv, err := server.New(server.Config{Listen: listen, UDPSockets: 2, Inherited: files}, f.h, zaptest.NewLogger(t).Named("server"), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { defer close(f.done); sup.Run(ctx, srv) }()
	t.Cleanup(f.die)
	return f
}

func (f *frontend) die() {
	f.cancel()
	<-f.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}

// startHolder runs a holder in dir until the test ends or stop is called.
func startHolder(t *testing.T, dir string, timeout time.Duration) (h *Holder, stop func()) {
	t.Helper()
	return startHolderConfig(t, Config{Dir: dir, Timeout: timeout})
}

// startHolderConfig runs a holder of cfg until the test ends or stop is
// called.
func startHolderConfig(t *testing.T, cfg Config) (h *Holder, stop func()) {
	t.Helper()
	h, err := New(cfg, afterTestQuiet(t).Named("holder"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, func() { close(started) }) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("holder: %v", err)
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("holder: %v", err)
		}
	}
	t.Cleanup(stop)
	return h, stop
}

// waitHeld waits until h holds n sockets.
func waitHeld(t *testing.T, h *Holder, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for h.Held() != n {
		if time.Now().After(deadline) {
			t.Fatalf("holder holds %d sockets after 3s, want %d", h.Held(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// client is one stub resolver: a UDP socket of its own (its own source
// port, so that clients spread over a SO_REUSEPORT group) and the ID of
// the query it sent.
type client struct {
	c  net.Conn
	id uint16
}

// sendQueries sends one query from each of n new sockets.
func sendQueries(t *testing.T, addr string, n int) []client {
	t.Helper()
	cs := make([]client, n)
	for i := range cs {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		q := new(dns.Msg).SetQuestion("q.example.", dns.TypeA)
		q.Id = uint16(i + 1)
		wire, _ := q.Pack()
		if _, err := c.Write(wire); err != nil {
			t.Fatal(err)
		}
		cs[i] = client{c: c, id: q.Id}
	}
	return cs
}

// answered counts the clients that get their answer within wait.
func answered(cs []client, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	n := 0
	buf := make([]byte, 512)
	for _, c := range cs {
		// Past the deadline, still take what has arrived.
		d := deadline
		if soon := time.Now().Add(5 * time.Millisecond); d.Before(soon) {
			d = soon
		}
		_ = c.c.SetReadDeadline(d)
		for {
			m, err := c.c.Read(buf)
			if err != nil {
				break
			}
			if m >= 2 && uint16(buf[0])<<8|uint16(buf[1]) == c.id {
				n++
				break
			}
		}
	}
	return n
}

// reusePortUDP binds a UDP socket with SO_REUSEPORT to addr: a member of
// its own in the address's group.
func reusePortUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return pc.(*net.UDPConn)
}

// fileDonor gives duplicates of fixed files.
type fileDonor []*os.File

func (d fileDonor) Files() ([]*os.File, error) {
	var out []*os.File
	for _, f := range d {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, os.NewFile(uintptr(fd), f.Name()))
	}
	return out, nil
}

// afterTestQuiet returns a logger that writes to t until the test ends and
// drops what comes later: relayed queries still in flight when the holder
// stops are answered, and logged, after the test returns (relay.stop waits
// for the readers only), and testing forbids a Log past a test's end.
func afterTestQuiet(t *testing.T) *zap.Logger {
	w := &quietWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.DebugLevel))
}

type quietWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *quietWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
