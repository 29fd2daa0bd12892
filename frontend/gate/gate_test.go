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

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
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

func run(t *testing.T, cfg Config) (*Gate, *vm.Set, chan change) {
	t.Helper()
	changes := make(chan change, 16)
	cfg.OnChange = func(ready bool, detail string) { changes <- change{ready, detail} }
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	set := metrics.NewSet()
	g, err := New(cfg, zap.NewNop(), set)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g, set, changes
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

func TestWaitUntilReady(t *testing.T) {
	b := newDNSBackend(t, dns.RcodeSuccess)
	var httpOK atomic.Bool
	g, set, changes := run(t, Config{Backend: b.addr, ReadyURL: readyServer(t, &httpOK)})

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
	if v := metricstest.Value(t, set, "nodedns_backend_ready"); v != 1 {
		t.Errorf("backend_ready = %v", v)
	}
	if v := metricstest.Value(t, set, "nodedns_backend_probe_failures_total", "probe", "dns", "reason", "refused"); v < 1 {
		t.Errorf("probe_failures_total{dns,refused} = %v", v)
	}
	if v := metricstest.Value(t, set, "nodedns_backend_probe_failures_total", "probe", "http", "reason", "status"); v < 1 {
		t.Errorf("probe_failures_total{http,status} = %v", v)
	}
}

func TestBackendRestart(t *testing.T) {
	b := newDNSBackend(t, dns.RcodeSuccess)
	b.start()
	var httpOK atomic.Bool
	httpOK.Store(true)
	_, set, changes := run(t, Config{Backend: b.addr, ReadyURL: readyServer(t, &httpOK)})
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
	if v := metricstest.Value(t, set, "nodedns_backend_ready"); v != 0 {
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
			g, err := New(Config{Backend: srv.Addr}, zap.NewNop(), metrics.NewSet())
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
	set := metrics.NewSet()
	g, err := New(Config{Backend: l.Addr().String(), Timeout: 50 * time.Millisecond}, zap.NewNop(), set)
	if err != nil {
		t.Fatal(err)
	}
	ready, detail := g.Check(context.Background())
	if ready || detail != "backend "+l.Addr().String()+": i/o timeout" {
		t.Errorf("Check = %v, %q", ready, detail)
	}
	if v := metricstest.Value(t, set, "nodedns_backend_probe_failures_total", "probe", "dns", "reason", "timeout"); v != 1 {
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
		{"ready url without port", Config{ReadyURL: "http://localhost/ready"}, true},
		{"https ready url", Config{ReadyURL: "https://127.0.0.1:8181/ready"}, false},
		{"ftp ready url", Config{ReadyURL: "ftp://127.0.0.1:8181/ready"}, false},
		{"ready url without host", Config{ReadyURL: "http:///ready"}, false},
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

// TestCheckHTTP runs the HTTP probe alone (the DNS backend answers) against
// readiness endpoints that pass and fail in each way, and checks the
// verdict, its detail and the failure counted.
func TestCheckHTTP(t *testing.T) {
	srv := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		_ = w.WriteMsg(m)
	}))
	status := func(code int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/ready" || !r.Close {
				t.Errorf("request %s %s close=%v, want GET /ready with Connection: close", r.Method, r.URL.Path, r.Close)
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL + "/ready"
	}
	// hung accepts connections (the kernel does, from its backlog) and
	// never answers.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Close() })
	refused := "http://" + refusedAddr(t) + "/ready"

	for _, tc := range []struct {
		name   string
		url    string
		ready  bool
		detail string // in the detail
		reason string // counted for probe="http"; "" for none
	}{
		{"200", status(http.StatusOK, "OK"), true, "ready", ""},
		{"200 with a large body", status(http.StatusOK, strings.Repeat("x", 1<<20)), true, "ready", ""},
		{"503", status(http.StatusServiceUnavailable, "kubernetes\nmore\n"), false,
			"not ready: 503 Service Unavailable (kubernetes)", "status"},
		{"503 without a body", status(http.StatusServiceUnavailable, ""), false,
			"not ready: 503 Service Unavailable", "status"},
		{"404", status(http.StatusNotFound, ""), false, "not ready: 404 Not Found", "status"},
		{"refused", refused, false, "backend ready url " + refused + ": connection refused", "refused"},
		{"timeout", "http://" + hung.Addr().String() + "/ready", false, ": i/o timeout", "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := metrics.NewSet()
			g, err := New(Config{Backend: srv.Addr, ReadyURL: tc.url, Timeout: 200 * time.Millisecond}, zap.NewNop(), set)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ready, detail := g.Check(context.Background())
			if ready != tc.ready || !strings.Contains(detail, tc.detail) {
				t.Errorf("Check = %v, %q; want %v, containing %q", ready, detail, tc.ready, tc.detail)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Check took %v with a 200ms timeout", d)
			}
			for name, v := range metrics.Values(set) {
				if !strings.HasPrefix(name, "nodedns_backend_probe_failures_total{") {
					continue
				}
				want := 0.0
				if name == metrics.Name("nodedns_backend_probe_failures_total", "probe", "http", "reason", tc.reason) {
					want = 1
				}
				if v != want {
					t.Errorf("%s = %v, want %v", name, v, want)
				}
			}
			if tc.reason != "" {
				if v := metricstest.Value(t, set, "nodedns_backend_probe_failures_total", "probe", "http", "reason", tc.reason); v != 1 {
					t.Errorf("probe_failures_total{http,%s} = %v, want 1", tc.reason, v)
				}
			}
		})
	}
}

// TestCheckHTTPCanceled checks that a probe stops when its caller's context
// ends, before its own timeout.
func TestCheckHTTPCanceled(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	srv := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		_ = w.WriteMsg(m)
	}))
	set := metrics.NewSet()
	g, err := New(Config{Backend: srv.Addr, ReadyURL: "http://" + hung.Addr().String() + "/ready", Timeout: time.Minute}, zap.NewNop(), set)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if ready, detail := g.Check(ctx); ready {
		t.Errorf("Check = %v, %q", ready, detail)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Check took %v after its context was canceled at 50ms", d)
	}
	if v := metricstest.Value(t, set, "nodedns_backend_probe_failures_total", "probe", "http", "reason", "canceled"); v != 1 {
		t.Errorf("probe_failures_total{http,canceled} = %v, want 1", v)
	}
}

// TestNewRejectsHTTPS checks that a ready URL the probe cannot speak fails
// at New, with the reason, rather than at every probe.
func TestNewRejectsHTTPS(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:8181/ready", "HTTPS://127.0.0.1:8181/ready", "unix:///run/ready"} {
		_, err := New(Config{ReadyURL: u}, zap.NewNop(), metrics.NewSet())
		if err == nil || !strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), "plain HTTP only") {
			t.Errorf("New with ready url %q: %v, want an unsupported scheme error", u, err)
		}
	}
}

// TestMetricsPreCreated checks the series exist before any probe.
func TestMetricsPreCreated(t *testing.T) {
	set := metrics.NewSet()
	if _, err := New(Config{}, zap.NewNop(), set); err != nil {
		t.Fatal(err)
	}
	got := metrics.Values(set)
	want := []string{"nodedns_backend_ready", metrics.Name("nodedns_backend_probe_failures_total", "probe", "http", "reason", "status")}
	for _, p := range []string{"http", "dns"} {
		for _, r := range []string{"refused", "timeout", "reset", "eof", "mismatch", "canceled", "other"} {
			want = append(want, metrics.Name("nodedns_backend_probe_failures_total", "probe", p, "reason", r))
		}
	}
	for _, name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	if _, err := New(Config{}, zap.NewNop(), set); err == nil {
		t.Error("second gate on one set: no error")
	}
}

func TestParseStatusLine(t *testing.T) {
	for _, c := range []struct {
		line   string
		code   int
		status string
	}{
		{"HTTP/1.1 200 OK", 200, "200 OK"},
		{"HTTP/1.0 503 Service Unavailable", 503, "503 Service Unavailable"},
		{"HTTP/1.1 204", 204, "204"},
		{"HTTP/2 200 OK", 0, ""},
		{"HTTP/1.1 20 OK", 0, ""},
		{"HTTP/1.1 2000 OK", 0, ""},
		{"HTTP/1.1 abc OK", 0, ""},
		{"SSH-2.0-OpenSSH", 0, ""},
		{"", 0, ""},
	} {
		code, status, err := parseStatusLine(c.line)
		if code != c.code || status != c.status || (err == nil) != (c.code != 0) {
			t.Errorf("parseStatusLine(%q) = %d, %q, %v; want %d, %q", c.line, code, status, err, c.code, c.status)
		}
	}
}
