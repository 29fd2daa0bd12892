package handover

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics"
)

// countingHandler answers every query as its own echo and counts them;
// names starting with "m" are misses that take a few milliseconds, so that
// the old instance has answers in flight when it is told to stop.
type countingHandler struct{ served atomic.Int64 }

func echo(dst, req []byte) []byte {
	dst = append(dst[:0], req...)
	dst[2] |= 0x80
	return dst
}

func (h *countingHandler) ServeFast(dst, req []byte, _ server.Proto) ([]byte, bool) {
	if len(req) > 13 && req[13] == 'm' {
		return nil, false
	}
	h.served.Add(1)
	return echo(dst, req), true
}

func (h *countingHandler) ServeSlow(_ context.Context, dst, req []byte, _ server.Proto) []byte {
	time.Sleep(5 * time.Millisecond)
	h.served.Add(1)
	return echo(dst, req)
}

func (h *countingHandler) Overloaded(dst, req []byte, _ server.Proto) []byte { return nil }

func newServer(t *testing.T, listen []string, files []*os.File) (*server.Server, *countingHandler) {
	t.Helper()
	h := &countingHandler{}
	s, err := server.New(server.Config{Listen: listen, UDPSockets: 2, Inherited: files}, h, zaptest.NewLogger(t), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s, h
}

// load sends queries from several clients, each waiting for its answer,
// until stop closes; it counts the queries that got no answer.
type load struct {
	sent, lost atomic.Int64
	wg         sync.WaitGroup
	stop       chan struct{}
}

func startLoad(t *testing.T, addr string, clients int) *load {
	l := &load{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			name := "hit.example."
			if i%2 == 1 {
				name = "miss.example."
			}
			buf := make([]byte, 512)
			for id := uint16(1); ; id++ {
				select {
				case <-l.stop:
					return
				default:
				}
				q := new(dns.Msg).SetQuestion(name, dns.TypeA)
				q.Id = id
				wire, _ := q.Pack()
				l.sent.Add(1)
				if _, err := c.Write(wire); err != nil {
					t.Error(err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				for {
					n, err := c.Read(buf)
					if err != nil {
						l.lost.Add(1)
						break
					}
					if n >= 2 && uint16(buf[0])<<8|uint16(buf[1]) == id {
						break
					}
				}
			}
		}()
	}
	return l
}

func (l *load) finish() { close(l.stop); l.wg.Wait() }

// TestHandoverLosesNoQuery hands the sockets of a server under continuous
// load to a new one: every query is answered, by the old instance before
// and the new one after.
func TestHandoverLosesNoQuery(t *testing.T) {
	dir := t.TempDir()
	old, oldH := newServer(t, []string{"127.0.0.1:0"}, nil)
	listen := old.Addrs()
	ln, err := Listen(dir, listen, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	oldDone := make(chan error, 1)
	go func() {
		h, err := ln.Accept(context.Background(), old)
		if err != nil {
			oldDone <- err
			return
		}
		old.StopReading()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		oldDone <- errors.Join(old.Shutdown(ctx), h.Done())
	}()

	ld := startLoad(t, listen[0], 4)
	time.Sleep(300 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	succ, files, err := Receive(ctx, dir, listen)
	if err != nil || succ == nil {
		t.Fatalf("Receive: %v, %v", succ, err)
	}
	if len(files) != 3 {
		t.Errorf("received %d sockets, want 2 UDP + 1 TCP", len(files))
	}
	nw, newH := newServer(t, listen, files)
	if got := nw.Addrs(); got[0] != listen[0] {
		t.Fatalf("new instance serves %v, want %v", got, listen)
	}
	if err := succ.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := succ.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-oldDone; err != nil {
		t.Fatalf("old instance: %v", err)
	}
	oldServed := oldH.served.Load()
	time.Sleep(300 * time.Millisecond)
	ld.finish()

	t.Logf("%d queries, %d lost; old answered %d, new %d", ld.sent.Load(), ld.lost.Load(), oldServed, newH.served.Load())
	if ld.lost.Load() != 0 {
		t.Errorf("%d of %d queries lost across the handover", ld.lost.Load(), ld.sent.Load())
	}
	if oldServed == 0 || newH.served.Load() == 0 {
		t.Errorf("old answered %d, new %d: want both", oldServed, newH.served.Load())
	}
	// TCP goes to the new instance too.
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("hit.tcp.", dns.TypeA), listen[0]); err != nil {
		t.Errorf("tcp after handover: %v", err)
	}
}

func TestReceiveWithoutPredecessor(t *testing.T) {
	succ, files, err := Receive(context.Background(), t.TempDir(), []string{"127.0.0.1:53"})
	if succ != nil || files != nil || err != nil {
		t.Fatalf("got %v %v %v, want nothing", succ, files, err)
	}
}

// TestRefuseOtherListen: an instance serving other addresses is not a
// predecessor; it keeps its sockets.
func TestRefuseOtherListen(t *testing.T) {
	dir := t.TempDir()
	old, _ := newServer(t, []string{"127.0.0.1:0"}, nil)
	ln, err := Listen(dir, old.Addrs(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	accepted := make(chan error, 1)
	go func() { _, err := ln.Accept(ctx, old); accepted <- err }()
	_, _, err = Receive(context.Background(), dir, []string{"127.0.0.2:53"})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Receive: %v, want ErrRefused", err)
	}
	cancel()
	if err := <-accepted; !errors.Is(err, context.Canceled) {
		t.Fatalf("Accept: %v, want it still waiting until cancelled", err)
	}
}

// TestAbortKeepsOldServing: a successor that gives up before "ready"
// leaves the old instance serving, and a later one can still take over.
func TestAbortKeepsOldServing(t *testing.T) {
	dir := t.TempDir()
	old, _ := newServer(t, []string{"127.0.0.1:0"}, nil)
	listen := old.Addrs()
	ln, err := Listen(dir, listen, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *Handover, 1)
	go func() { h, _ := ln.Accept(context.Background(), old); got <- h }()
	succ, files, err := Receive(context.Background(), dir, listen)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	_ = succ.Abort()
	c := &dns.Client{Timeout: 2 * time.Second}
	if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("hit.still.", dns.TypeA), listen[0]); err != nil {
		t.Fatalf("old after an aborted handover: %v", err)
	}
	succ, files, err = Receive(context.Background(), dir, listen)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err := succ.Ready(); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h == nil {
			t.Fatal("Accept returned no handover")
		}
		_ = h.Done()
	case <-time.After(5 * time.Second):
		t.Fatal("second successor not accepted")
	}
}
