package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/metrics"
	"go.uber.org/zap/zaptest"
)

// holdPort binds a UDP socket and a TCP listener on one loopback port
// without SO_REUSEPORT, as dnsmasq holds its port 53, and returns the
// address and a function that releases both.
func holdPort(t *testing.T) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", l.Addr().String())
	if err != nil {
		l.Close()
		t.Skipf("udp port of %s taken: %v", l.Addr(), err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			pc.Close()
			l.Close()
		})
	}
	t.Cleanup(release)
	return l.Addr().String(), release
}

func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg, &fakeHandler{}, zaptest.NewLogger(t), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// TestBindRetryWaitsForHolder: an address another process holds without
// SO_REUSEPORT is bound as soon as that process lets go, within BindRetry;
// without BindRetry the bind fails at once with EADDRINUSE; past
// BindRetry, or once the context ends, it fails naming the address.
func TestBindRetryWaitsForHolder(t *testing.T) {
	t.Run("released in time", func(t *testing.T) {
		addr, release := holdPort(t)
		s := newTestServer(t, Config{Listen: []string{addr}, BindRetry: 5 * time.Second})
		time.AfterFunc(500*time.Millisecond, release)
		start := time.Now()
		if err := s.StartContext(context.Background()); err != nil {
			t.Fatalf("StartContext: %v", err)
		}
		if d := time.Since(start); d < 400*time.Millisecond || d > 500*time.Millisecond+5*BindRetryInterval {
			t.Errorf("bound after %s, want soon after the holder's release at 500ms", d)
		}
		if got := s.Addrs(); len(got) != 1 || got[0] != addr {
			t.Errorf("Addrs() = %v, want [%s]", got, addr)
		}
	})
	t.Run("no retry", func(t *testing.T) {
		addr, _ := holdPort(t)
		s := newTestServer(t, Config{Listen: []string{addr}})
		start := time.Now()
		err := s.Start()
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("Start: %v, want EADDRINUSE", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("failed after %s, want at once", d)
		}
	})
	t.Run("held too long", func(t *testing.T) {
		addr, _ := holdPort(t)
		s := newTestServer(t, Config{Listen: []string{addr}, BindRetry: 400 * time.Millisecond})
		start := time.Now()
		err := s.StartContext(context.Background())
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("StartContext: %v, want EADDRINUSE", err)
		}
		if d := time.Since(start); d < 400*time.Millisecond || d > 2*time.Second {
			t.Errorf("failed after %s, want after the 400ms BindRetry", d)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		addr, _ := holdPort(t)
		s := newTestServer(t, Config{Listen: []string{addr}, BindRetry: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := s.StartContext(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("StartContext: %v, want EADDRINUSE and the context's end", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("failed after %s, want at the context's end (300ms)", d)
		}
	})
}
