package gate

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// dnsBackend serves rcode over TCP on a fixed loopback address that
// stays the same across start and stop, like a restarting backend.
type dnsBackend struct {
	t     *testing.T
	addr  string
	rcode int
	mu    sync.Mutex
	srv   *dns.Server
}

func newDNSBackend(t *testing.T, rcode int) *dnsBackend {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &dnsBackend{t: t, addr: l.Addr().String(), rcode: rcode}
	l.Close()
	t.Cleanup(b.stop)
	return b
}

func (b *dnsBackend) start() {
	b.t.Helper()
	l, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.t.Fatalf("listen %s: %v", b.addr, err)
	}
	srv := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, b.rcode)
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
}

func (b *dnsBackend) stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Shutdown()
	}
}

// readyServer is the backend's /ready endpoint, toggled by ok.
func readyServer(t *testing.T, ok *atomic.Bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ok.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("kubernetes\n"))
			return
		}
		_, _ = w.Write([]byte("OK"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/ready"
}

type change struct {
	ready  bool
	detail string
}

func run(t *testing.T, cfg Config) (*Gate, *prometheus.Registry, chan change) {
	t.Helper()
	changes := make(chan change, 16)
	cfg.OnChange = func(ready bool, detail string) { changes <- change{ready, detail} }
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	reg := prometheus.NewRegistry()
	g, err := New(cfg, zap.NewNop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g, reg, changes
}

func next(t *testing.T, changes chan change) change {
	t.Helper()
	select {
	case c := <-changes:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no readiness change")
		return change{}
	}
}

func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var pb dto.Metric
	if err := (<-ch).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if pb.Gauge != nil {
		return pb.Gauge.GetValue()
	}
	return pb.Counter.GetValue()
}

func TestWaitUntilReady(t *testing.T) {
	b := newDNSBackend(t, dns.RcodeSuccess)
	var httpOK atomic.Bool
	g, _, changes := run(t, Config{Backend: b.addr, ReadyURL: readyServer(t, &httpOK)})

	c := next(t, changes)
	if c.ready {
		t.Fatal("ready with nothing listening")
	}
	for _, want := range []string{"backend " + b.addr + ": connection refused", "503 Service Unavailable (kubernetes)"} {
		if !strings.Contains(c.detail, want) {
			t.Errorf("detail %q lacks %q", c.detail, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Wait = %v, want a deadline error with the last detail", err)
	}

	b.start() // DNS up, but plugins not ready yet: still not ready
	time.Sleep(100 * time.Millisecond)
	if ok, detail := g.Ready(); ok || strings.Contains(detail, "connection refused") {
		t.Errorf("Ready() = %v, %q; want not ready for the HTTP probe only", ok, detail)
	}
	httpOK.Store(true)
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := next(t, changes); !c.ready {
		t.Errorf("change %+v, want ready", c)
	}
	if ok, detail := g.Ready(); !ok || !strings.Contains(detail, "ready") {
		t.Errorf("Ready() = %v, %q", ok, detail)
	}
	if v := value(t, g.m.ready); v != 1 {
		t.Errorf("backend_ready = %v", v)
	}
	if v := value(t, g.m.failures.WithLabelValues("dns", "refused")); v < 1 {
		t.Errorf("probe_failures_total{dns,refused} = %v", v)
	}
	if v := value(t, g.m.failures.WithLabelValues("http", "status")); v < 1 {
		t.Errorf("probe_failures_total{http,status} = %v", v)
	}
}

func TestBackendRestart(t *testing.T) {
	b := newDNSBackend(t, dns.RcodeSuccess)
	b.start()
	var httpOK atomic.Bool
	httpOK.Store(true)
	g, _, changes := run(t, Config{Backend: b.addr, ReadyURL: readyServer(t, &httpOK)})
	if c := next(t, changes); !c.ready {
		t.Fatalf("first change %+v", c)
	}
	b.stop()
	c := next(t, changes)
	// Usually "connection refused"; a probe caught by the shutdown sees the
	// connection closed instead.
	if c.ready || !strings.HasPrefix(c.detail, "backend "+b.addr+": connection ") {
		t.Errorf("after stop: %+v", c)
	}
	if v := value(t, g.m.ready); v != 0 {
		t.Errorf("backend_ready = %v", v)
	}
	b.start()
	if c := next(t, changes); !c.ready {
		t.Errorf("after restart: %+v", c)
	}
}

func TestCheckRcodes(t *testing.T) {
	for _, tc := range []struct {
		rcode int
		ready bool
	}{
		{dns.RcodeSuccess, true},
		{dns.RcodeNameError, true},
		{dns.RcodeRefused, true},
		{dns.RcodeServerFailure, true}, // the listener works; see probeDNS
	} {
		t.Run(dns.RcodeToString[tc.rcode], func(t *testing.T) {
			srv := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
				m := new(dns.Msg)
				m.SetRcode(r, tc.rcode)
				_ = w.WriteMsg(m)
			}))
			g, err := New(Config{Backend: srv.Addr}, zap.NewNop(), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ready, detail := g.Check(context.Background())
			if ready != tc.ready || !strings.Contains(detail, dns.RcodeToString[tc.rcode]) {
				t.Errorf("Check = %v, %q", ready, detail)
			}
		})
	}
}

func TestCheckTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0") // accepts (backlog), never answers
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := New(Config{Backend: l.Addr().String(), Timeout: 50 * time.Millisecond}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ready, detail := g.Check(context.Background())
	if ready || detail != "backend "+l.Addr().String()+": i/o timeout" {
		t.Errorf("Check = %v, %q", ready, detail)
	}
	if v := value(t, g.m.failures.WithLabelValues("dns", "timeout")); v != 1 {
		t.Errorf("probe_failures_total{dns,timeout} = %v", v)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"defaults", Config{ReadyURL: DefaultReadyURL}, true},
		{"backend without port", Config{Backend: "127.0.0.1"}, false},
		{"ready url without scheme", Config{ReadyURL: "127.0.0.1:8181/ready"}, false},
		{"bad probe name", Config{ProbeName: "a..b"}, false},
		{"negative interval", Config{Interval: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
