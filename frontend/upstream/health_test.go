package upstream

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// TestHealthProbes walks the health of one address through probe and
// query results: only failed probes mark it down and grow its backoff.
func TestHealthProbes(t *testing.T) {
	const interval = time.Second
	h := health{threshold: 2, interval: interval, backoffMax: 4 * interval}
	now := time.Unix(0, 0)
	boom := errors.New("boom")
	for range 100 {
		h.queryFailed(now, boom)
	}
	if h.isDown() {
		t.Fatal("failed queries marked the address down")
	}
	if down, up, wait := h.probed(now, boom); down || up || wait != interval {
		t.Fatalf("first failed probe: down %v, up %v, wait %v; want nothing yet, the interval", down, up, wait)
	}
	if down, _, wait := h.probed(now, boom); !down || wait != interval || !h.isDown() {
		t.Fatalf("second failed probe: down %v, wait %v; want down, then a probe after the interval", down, wait)
	}
	next := h.snapshot().nextProbe
	// Failures that land while it is down, of queries started before or
	// after, change neither the next probe nor the backoff.
	for range 10 {
		h.queryFailed(now.Add(time.Millisecond), boom)
	}
	if got := h.snapshot().nextProbe; !got.Equal(next) {
		t.Fatalf("failed queries while down moved the next probe from %v to %v", next, got)
	}
	// Each failed probe doubles the wait, up to the maximum.
	for i, want := range []time.Duration{2 * interval, 4 * interval, 4 * interval} {
		if down, up, wait := h.probed(now, boom); down || up || wait != want {
			t.Fatalf("failed probe %d while down: down %v, up %v, wait %v; want %v", i, down, up, wait, want)
		}
	}
	if down, up, wait := h.probed(now, nil); down || !up || wait != interval || h.isDown() {
		t.Fatalf("answered probe: down %v, up %v, wait %v; want up, then the interval", down, up, wait)
	}
	if down, _, _ := h.probed(now, boom); down {
		t.Fatal("one failed probe after recovery marked it down")
	}
}

// TestDeadBackendMarkedDownByProbe: a backend that really dies (its
// listener closed) is marked down by its probes within a bounded number of
// intervals, misses then go to the fallback, and once it listens again its
// probe brings it back within an interval.
func TestDeadBackendMarkedDownByProbe(t *testing.T) {
	const interval = 100 * time.Millisecond
	b := &backend{ip: net.IPv4(10, 0, 0, 1)}
	addr, stop := serveTCP(t, "127.0.0.1:0", b, &b.accepted)
	fb := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 2)})
	p, set := newPool(t, Config{Backend: addr, Fallbacks: []string{fb.Addr},
		ProbeInterval: interval, ProbeTimeout: interval, BackoffMax: interval})
	if got := answeredBy(exchange(t, p, "a.example.")); got != "10.0.0.1" {
		t.Fatalf("answered by %q, want the backend", got)
	}

	stop()
	died := time.Now()
	// Two failed probes: at most three intervals after the death, plus a
	// probe timeout; allow one interval more for a loaded machine.
	bound := (DefaultFailThreshold+2)*interval + interval
	for p.Status().BackendHealthy {
		if time.Since(died) > 5*bound {
			t.Fatalf("backend still healthy %v after it died", time.Since(died))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(died); d > bound {
		t.Errorf("backend marked down %v after it died, want within %v", d, bound)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_healthy", "upstream", "backend", "address", addr); n != 0 {
		t.Errorf("healthy{backend} = %v, want 0", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_probes_total", "upstream", "backend", "result", "refused"); n < DefaultFailThreshold {
		t.Errorf("probes_total{backend,refused} = %v, want at least %d", n, DefaultFailThreshold)
	}
	for range 5 {
		if got := answeredBy(exchange(t, p, "b.example.")); got != "10.0.0.2" {
			t.Fatalf("answered by %q while the backend is down, want the fallback", got)
		}
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "error"); n != 0 {
		t.Errorf("requests_total{backend,error} = %v: misses tried the backend marked down", n)
	}

	b2 := &backend{ip: net.IPv4(10, 0, 0, 1)}
	serveTCP(t, addr, b2, &b2.accepted)
	back := time.Now()
	for !p.Status().BackendHealthy {
		if time.Since(back) > 10*interval {
			t.Fatalf("backend still down %v after it came back", time.Since(back))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(back); d > interval+interval/2 {
		t.Errorf("backend back in use %v after it listened again, want within an interval (%v)", d, interval)
	}
	if got := answeredBy(exchange(t, p, "c.example.")); got != "10.0.0.1" {
		t.Errorf("answered by %q after the backend came back", got)
	}
}

// TestAllDownStillTried: when the probes have every address down, a miss
// still tries them in order (the probes may be wrong), and a backend that
// answers it is probed at once and back in use.
func TestAllDownStillTried(t *testing.T) {
	const interval = 20 * time.Millisecond
	addr := deadAddr(t)
	p, _ := newPool(t, Config{Backend: addr, ProbeInterval: interval, BackoffMax: time.Hour})
	for p.Status().BackendHealthy {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA)); Reason(err) != ReasonRefused {
		t.Fatalf("all down: err %v, want the backend tried (refused)", err)
	}
	b := &backend{ip: net.IPv4(10, 0, 0, 1)}
	serveTCP(t, addr, b, &b.accepted)
	if got := answeredBy(exchange(t, p, "q.example.")); got != "10.0.0.1" {
		t.Fatalf("answered by %q, want the backend, marked down but alive", got)
	}
	deadline := time.Now().Add(time.Second) // far below the grown backoff
	for !p.Status().BackendHealthy {
		if time.Now().After(deadline) {
			t.Fatal("a backend that answered a miss was not probed back into use")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProbeNeedsNoError: a fallback relay that answers SERVFAIL (its own
// backend gone) is reachable but useless; its probes mark it down.
func TestProbeNeedsNoError(t *testing.T) {
	const interval = 20 * time.Millisecond
	be := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 1)})
	relay := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	}))
	p, set := newPool(t, Config{Backend: be.Addr, Fallbacks: []string{relay.Addr}, ProbeInterval: interval})
	deadline := time.Now().Add(2 * time.Second)
	for p.Status().Addresses[1].Healthy {
		if time.Now().After(deadline) {
			t.Fatal("a fallback answering SERVFAIL to its probes stayed healthy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := p.Status(); !s.BackendHealthy || s.Addresses[1].LastReason != ReasonRcode {
		t.Errorf("status %+v: want the backend healthy, the fallback down for its rcode", s)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_probes_total", "upstream", "fallback", "result", "rcode"); n < DefaultFailThreshold {
		t.Errorf("probes_total{fallback,rcode} = %v", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_probes_total", "upstream", "backend", "result", "ok"); n < 1 {
		t.Errorf("probes_total{backend,ok} = %v", n)
	}
}
