package main

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/metrics"
)

// TestGateFeedsPool: the gate's OnChange, as the frontend configures it,
// reaches the upstream pool: a backend marked down whose next probe is far
// off (its backoff has grown) is probed, and used again, as soon as the
// gate reports a change.
func TestGateFeedsPool(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: the backend is down
	pool, err := upstream.New(upstream.Config{Backend: addr, ProbeInterval: 20 * time.Millisecond, BackoffMax: time.Hour},
		zap.NewNop(), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	gc := gateConfig(config{backend: addr, backendReadyURL: "http://127.0.0.1:1/ready"}, pool)
	if gc.Backend != addr || gc.ReadyURL != "http://127.0.0.1:1/ready" || gc.OnChange == nil {
		t.Fatalf("gate config %+v: want the backend, the ready URL and an OnChange", gc)
	}

	// Wait until the backend is down and its next probe is a second away.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := pool.Status().Addresses[0]
		if !s.Healthy && time.Until(s.NextProbe) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend status %+v: never down with a grown backoff", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	next := pool.Status().Addresses[0].NextProbe

	// The backend comes back and the gate sees it ready.
	// It answers every question NOERROR, the probe's too.
	srv := &dns.Server{Addr: addr, Net: "tcp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case <-started:
	case err := <-served:
		t.Fatalf("backend on %s: %v", addr, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("backend on %s: not serving after 10s", addr)
	}
	t.Cleanup(func() { _ = srv.Shutdown() })

	gc.OnChange(true, "backend ready")
	changed := time.Now()
	for !pool.Status().BackendHealthy {
		if time.Now().After(next.Add(-500 * time.Millisecond)) {
			t.Fatalf("backend still down %v after the gate's change, with its own next probe due in %v",
				time.Since(changed), time.Until(next))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
