package upstream

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// backend is a fake upstream: it answers every A query with addr and
// counts the queries it received and the TCP connections it accepted.
type backend struct {
	ip       net.IP
	queries  atomic.Int64
	accepted atomic.Int64
	block    chan struct{} // when non-nil, queries wait for it to close
	// blockLater is block for a backend already serving, set while its
	// queries (and the pool's probes) may be read concurrently.
	blockLater atomic.Pointer[chan struct{}]
}

func (b *backend) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	b.queries.Add(1)
	if b.block != nil {
		<-b.block
	}
	if c := b.blockLater.Load(); c != nil {
		<-*c
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = append(m.Answer, &dns.A{
		Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
		A:   b.ip,
	})
	_ = w.WriteMsg(m)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serveTCP serves h over TCP on addr ("127.0.0.1:0" for any port), counting
// accepted connections in accepted, and returns the server's address and a
// stop function (also run at the end of the test).
func serveTCP(t *testing.T, addr string, h dns.Handler, accepted *atomic.Int64) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &dns.Server{Listener: countingListener{l, accepted}, Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.ShutdownContext(ctx)
		})
	}
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// blackhole accepts connections and never answers, like a hung backend.
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func newPool(t testing.TB, cfg Config) (*Pool, *vm.Set) {
	t.Helper()
	set := metrics.NewSet()
	p, err := New(cfg, zap.NewNop(), set)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, set
}

func exchange(t *testing.T, p *Pool, name string) *dns.Msg {
	t.Helper()
	r, err := p.Exchange(context.Background(), dnstest.Query(name, dns.TypeA))
	if err != nil {
		t.Fatalf("Exchange %s: %v", name, err)
	}
	return r
}

// answeredBy returns the A record of r, which tells which fake answered.
func answeredBy(r *dns.Msg) string {
	if len(r.Answer) == 0 {
		return ""
	}
	return r.Answer[0].(*dns.A).A.String()
}

func TestExchangeReusesConnection(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1)}
	addr, _ := serveTCP(t, "127.0.0.1:0", b, &b.accepted)
	p, set := newPool(t, Config{Backend: addr})
	for i := range 20 {
		r := exchange(t, p, "svc.example.")
		if got := answeredBy(r); got != "10.0.0.1" {
			t.Fatalf("query %d: answer %q", i, got)
		}
	}
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("backend accepted %d connections for 20 sequential queries, want 1", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_conns_open"); n != 1 {
		t.Errorf("conns_open = %v, want 1", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "ok"); n != 20 {
		t.Errorf("requests_total{backend,ok} = %v, want 20", n)
	}
}

func TestExchangeSurvivesBackendRestart(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1)}
	addr, stop := serveTCP(t, "127.0.0.1:0", b, &b.accepted)
	p, set := newPool(t, Config{Backend: addr})
	// Two connections in the pool, both of which die with the backend.
	block := make(chan struct{})
	b.blockLater.Store(&block)
	var wg sync.WaitGroup
	for _, n := range []string{"a.example.", "b.example."} {
		wg.Go(func() { exchange(t, p, n) })
	}
	for b.queries.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	close(block)
	wg.Wait()
	b.blockLater.Store(nil)

	stop()
	serveTCP(t, addr, b, &b.accepted)

	r := exchange(t, p, "c.example.")
	if got := answeredBy(r); got != "10.0.0.1" {
		t.Fatalf("answer after restart %q", got)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "error"); n != 0 {
		t.Errorf("requests_total{backend,error} = %v, want 0: a dead pooled connection must be retried", n)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_conns_open"); n != 1 {
		t.Errorf("conns_open = %v, want 1 (dead pooled connections flushed)", n)
	}
	if n := b.accepted.Load(); n != 3 {
		t.Errorf("accepted %d connections, want 3 (2 before the restart, 1 after)", n)
	}
}

func TestExchangeCoalescesIdenticalQueries(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1), block: make(chan struct{})}
	srv := dnstest.Start(t, b)
	p, set := newPool(t, Config{Backend: srv.Addr})

	const n = 16
	names := []string{"svc.example.", "SVC.Example."} // case does not split the flight (RFC 4343)
	res := make([]*dns.Msg, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			q := dnstest.Query(names[i%2], dns.TypeA)
			q.Id = uint16(i)
			r, err := p.Exchange(context.Background(), q)
			if err != nil {
				t.Errorf("Exchange %d: %v", i, err)
			}
			res[i] = r
		})
	}
	for metricstest.Value(t, set, "nodedns_upstream_coalesced_total") < n-1 {
		time.Sleep(time.Millisecond)
	}
	close(b.block)
	wg.Wait()
	if q := b.queries.Load(); q != 1 {
		t.Errorf("backend got %d queries for %d identical ones, want 1", q, n)
	}
	for i := range res {
		if res[i] != res[0] {
			t.Fatalf("response %d is not the shared one", i)
		}
	}

	// Different type, DO or CD bits are different questions.
	b.queries.Store(0)
	for _, q := range []*dns.Msg{
		dnstest.Query("svc.example.", dns.TypeAAAA),
		dnstest.Query("svc.example.", dns.TypeA).SetEdns0(1232, true),
		func() *dns.Msg { m := dnstest.Query("svc.example.", dns.TypeA); m.CheckingDisabled = true; return m }(),
	} {
		if _, err := p.Exchange(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	if q := b.queries.Load(); q != 3 {
		t.Errorf("backend got %d queries for 3 distinct ones", q)
	}
}

func TestExchangeCallerCancelDoesNotCancelOthers(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1), block: make(chan struct{})}
	srv := dnstest.Start(t, b)
	p, set := newPool(t, Config{Backend: srv.Addr})

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := p.Exchange(ctx, dnstest.Query("x.example.", dns.TypeA)); first <- err }()
	for b.queries.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		_, err := p.Exchange(context.Background(), dnstest.Query("x.example.", dns.TypeA))
		second <- err
	}()
	for metricstest.Value(t, set, "nodedns_upstream_coalesced_total") < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller got %v", err)
	}
	close(b.block)
	if err := <-second; err != nil {
		t.Errorf("other caller got %v", err)
	}
}

func TestExchangeRejectsMismatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func(*dns.Msg)
	}{
		{"id", func(m *dns.Msg) { m.Id++ }},
		{"name", func(m *dns.Msg) { m.Question[0].Name = "other.example." }},
		{"type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeMX }},
		{"not a response", func(m *dns.Msg) { m.Response = false }},
		{"no question in a NOERROR", func(m *dns.Msg) { m.Question = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
				m := new(dns.Msg)
				m.SetReply(r)
				tc.mangle(m)
				_ = w.WriteMsg(m)
			}))
			p, set := newPool(t, Config{Backend: srv.Addr})
			_, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA))
			if !errors.Is(err, ErrMismatch) || Reason(err) != ReasonMismatch {
				t.Fatalf("err = %v, want ErrMismatch", err)
			}
			if n := metricstest.Value(t, set, "nodedns_upstream_conns_open"); n != 0 {
				t.Errorf("conns_open = %v: a connection out of step must be closed", n)
			}
		})
	}
}

func TestExchangeAcceptsErrorWithoutQuestion(t *testing.T) {
	srv := dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeFormatError)
		m.Question = nil
		_ = w.WriteMsg(m)
	}))
	p, _ := newPool(t, Config{Backend: srv.Addr})
	r, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA))
	if err != nil || r.Rcode != dns.RcodeFormatError {
		t.Fatalf("Exchange = %v, %v; want the FORMERR", r, err)
	}
}

func TestExchangeTimeout(t *testing.T) {
	addr := blackhole(t)
	p, set := newPool(t, Config{Backend: addr, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA))
	if Reason(err) != ReasonTimeout {
		t.Fatalf("err = %v (reason %s), want a timeout", err, Reason(err))
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > time.Second {
		t.Errorf("timed out after %v, want about 100ms", d)
	}
	var ue *Error
	if !errors.As(err, &ue) || ue.Addr != addr || ue.Upstream != "backend" {
		t.Errorf("error %v does not name the backend", err)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "timeout"); n != 1 {
		t.Errorf("requests_total{backend,timeout} = %v", n)
	}
}

func TestExchangeOverloaded(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1), block: make(chan struct{})}
	srv := dnstest.Start(t, b)
	p, set := newPool(t, Config{Backend: srv.Addr, MaxInflight: 2})
	var wg sync.WaitGroup
	for _, n := range []string{"a.example.", "b.example."} {
		wg.Go(func() { exchange(t, p, n) })
	}
	for b.queries.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err := p.Exchange(context.Background(), dnstest.Query("c.example.", dns.TypeA))
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third exchange: %v, want ErrOverloaded", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("overload took %v to report, want at once", d)
	}
	// A query identical to one in flight joins it: no new exchange.
	done := make(chan error, 1)
	go func() {
		_, err := p.Exchange(context.Background(), dnstest.Query("a.example.", dns.TypeA))
		done <- err
	}()
	close(b.block)
	wg.Wait()
	if err := <-done; err != nil {
		t.Errorf("coalesced query at the bound: %v", err)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "overloaded"); n != 1 {
		t.Errorf("requests_total{backend,overloaded} = %v, want 1", n)
	}
	exchange(t, p, "d.example.") // room again
}

func TestExchangeFallsBackWhenBackendDown(t *testing.T) {
	fb := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 2)})
	dead := deadAddr(t)
	p, set := newPool(t, Config{Backend: dead, Fallbacks: []string{deadAddr(t), fb.Addr}})
	r := exchange(t, p, "q.example.")
	if got := answeredBy(r); got != "10.0.0.2" {
		t.Fatalf("answered by %q, want the second fallback", got)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_fallback_total"); n != 1 {
		t.Errorf("fallback_total = %v, want 1", n)
	}
	s := p.Status()
	if s.Using != fb.Addr || s.UsingKind != "fallback" || Reason(errors.New(s.LastError)) == "" {
		t.Errorf("status %+v", s)
	}
	if s.Addresses[0].LastReason != ReasonRefused {
		t.Errorf("backend reason %q, want refused", s.Addresses[0].LastReason)
	}
}

// TestFallbackRedialsRefused: a fallback that is a Service's ClusterIP
// spreads connections over its endpoints, one of which may be a dead
// backend not yet removed. A refused dial is made again at once (the
// dialer's Control refuses the first ones here, as kube-proxy's DNAT to a
// dead endpoint would); the backend's refusals are not.
func TestFallbackRedialsRefused(t *testing.T) {
	fb := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 2)})
	for _, c := range []struct {
		refusals int
		want     string // answering address, "" for none
	}{{0, "10.0.0.2"}, {1, "10.0.0.2"}, {fallbackRedials, "10.0.0.2"}, {fallbackRedials + 1, ""}} {
		p, _ := newPool(t, Config{Backend: deadAddr(t), Fallbacks: []string{fb.Addr}, FailThreshold: 5})
		var dials atomic.Int32
		refusals := int32(c.refusals)
		p.addrs[1].dialer.Control = func(string, string, syscall.RawConn) error {
			if dials.Add(1) <= refusals {
				return syscall.ECONNREFUSED
			}
			return nil
		}
		r, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA))
		switch {
		case c.want == "" && Reason(err) != ReasonRefused:
			t.Errorf("%d refusals: err %v, want refused", c.refusals, err)
		case c.want != "" && (err != nil || answeredBy(r) != c.want):
			t.Errorf("%d refusals: %v, %v; want an answer from the fallback", c.refusals, r, err)
		}
		if want := int32(min(c.refusals, fallbackRedials) + 1); dials.Load() != want {
			t.Errorf("%d refusals: %d dials of the fallback, want %d", c.refusals, dials.Load(), want)
		}
	}
	// The backend is dialled once per exchange: it is one process.
	p, _ := newPool(t, Config{Backend: deadAddr(t), FailThreshold: 5})
	var dials atomic.Int32
	p.addrs[0].dialer.Control = func(string, string, syscall.RawConn) error { dials.Add(1); return nil }
	if _, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA)); Reason(err) != ReasonRefused || dials.Load() != 1 {
		t.Errorf("dead backend: err %v after %d dials, want refused after 1", err, dials.Load())
	}
}

func TestIdleConnectionsExpire(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1)}
	addr, _ := serveTCP(t, "127.0.0.1:0", b, &b.accepted)
	p, set := newPool(t, Config{Backend: addr, IdleTimeout: 50 * time.Millisecond})
	exchange(t, p, "q.example.")
	deadline := time.Now().Add(2 * time.Second)
	for metricstest.Value(t, set, "nodedns_upstream_conns_open") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle connection not closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	exchange(t, p, "q.example.")
	if n := b.accepted.Load(); n != 2 {
		t.Errorf("accepted %d, want 2", n)
	}
}

func TestClose(t *testing.T) {
	b := &backend{ip: net.IPv4(10, 0, 0, 1), block: make(chan struct{})}
	srv := dnstest.Start(t, b)
	t.Cleanup(func() { close(b.block) }) // before the server's cleanup: it waits for the handler
	p, set := newPool(t, Config{Backend: srv.Addr})
	done := make(chan error, 1)
	go func() {
		_, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA))
		done <- err
	}()
	for b.queries.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("in-flight exchange got %v, want ErrClosed", err)
	}
	if _, err := p.Exchange(context.Background(), dnstest.Query("q.example.", dns.TypeA)); !errors.Is(err, ErrClosed) {
		t.Errorf("exchange after Close: %v", err)
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_conns_open"); n != 0 {
		t.Errorf("conns_open = %v after Close", n)
	}
}

func TestExchangeBadQuery(t *testing.T) {
	p, _ := newPool(t, Config{Backend: deadAddr(t)})
	if _, err := p.Exchange(context.Background(), new(dns.Msg)); !errors.Is(err, ErrBadQuery) {
		t.Errorf("err = %v", err)
	}
}
