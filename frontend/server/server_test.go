package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// fakeHandler answers by the first label of the query name:
// hit* from ServeFast, miss* from ServeSlow (after waiting on gate when
// set), panic* panics, drop* is dropped, big* answers with more than fits
// in a UDP arena.
type fakeHandler struct {
	gate  chan struct{} // when non-nil, ServeSlow waits for it
	slow  atomic.Int64  // ServeSlow calls
	delay time.Duration // ServeSlow sleeps this long

	running, maxRunning atomic.Int64 // ServeSlow calls at once, and the most seen
}

func firstLabel(req []byte) string {
	if len(req) < 13 {
		return ""
	}
	l := int(req[12])
	if 13+l > len(req) {
		return ""
	}
	return string(req[13 : 13+l])
}

// answer echoes req as a response: QR set, NOERROR. No allocation.
func answer(dst, req []byte) []byte {
	dst = append(dst[:0], req...)
	dst[2] |= 0x80
	return dst
}

func (f *fakeHandler) ServeFast(dst, req []byte, _ Proto) ([]byte, bool) {
	if len(req) > 13 {
		switch req[13] { // first letter of the first label, without allocating
		case 'h':
			return answer(dst, req), true
		case 'p':
			panic("handler bug")
		case 'd':
			return nil, true
		case 'b':
			resp := answer(dst, req)
			return append(resp, make([]byte, 70000)...), true // too big for any transport
		}
	}
	return nil, false
}

func (f *fakeHandler) ServeSlow(ctx context.Context, dst, req []byte, _ Proto) []byte {
	f.slow.Add(1)
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for m := f.maxRunning.Load(); n > m && !f.maxRunning.CompareAndSwap(m, n); m = f.maxRunning.Load() {
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil
		}
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if strings.HasPrefix(firstLabel(req), "slowpanic") {
		panic("slow handler bug")
	}
	return answer(dst, req)
}

func (f *fakeHandler) Overloaded(dst, req []byte, _ Proto) []byte {
	dst = answer(dst, req)
	dst[3] = dst[3]&0xF0 | dns.RcodeServerFailure
	return dst
}

func startServer(t testing.TB, cfg Config, h Handler) (*Server, *vm.Set) {
	t.Helper()
	if cfg.Listen == nil {
		cfg.Listen = []string{"127.0.0.1:0"}
	}
	set := metrics.NewSet()
	s, err := New(cfg, h, zaptest.NewLogger(t), set)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, set
}

var (
	udpIn  = metrics.Name("nodedns_server_packets_total", "proto", "udp", "direction", "in")
	udpOut = metrics.Name("nodedns_server_packets_total", "proto", "udp", "direction", "out")
	tcpOut = metrics.Name("nodedns_server_packets_total", "proto", "tcp", "direction", "out")
)

func exchange(t testing.TB, network, addr, name string) (*dns.Msg, error) {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := c.Exchange(m, addr)
	return r, err
}

func mustExchange(t testing.TB, network, addr, name string) *dns.Msg {
	t.Helper()
	r, err := exchange(t, network, addr, name)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, addr, name, err)
	}
	return r
}

func TestServeUDPAndTCP(t *testing.T) {
	h := &fakeHandler{}
	s, set := startServer(t, Config{UDPSockets: 2}, h)
	addr := s.Addrs()[0]
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"hit.example.", "miss.example."} {
			t.Run(network+"/"+name, func(t *testing.T) {
				r := mustExchange(t, network, addr, name)
				if r.Rcode != dns.RcodeSuccess || r.Question[0].Name != name {
					t.Fatalf("got %v", r)
				}
			})
		}
	}
	if got := h.slow.Load(); got != 2 {
		t.Errorf("ServeSlow calls = %d, want 2", got)
	}
	if got := metricstest.Value(t, set, udpIn); got != 2 {
		t.Errorf("udp in = %v, want 2", got)
	}
	// Counted after the write returns, which may be after the client read.
	waitFor(t, func() bool { return metricstest.Value(t, set, tcpOut) == 2 && metricstest.Value(t, set, udpOut) == 2 })
	n := 0
	for name := range metrics.Values(set) {
		if strings.HasPrefix(name, "nodedns_server_batch_size_count") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("batch_size series = %d, want 1", n)
	}
}

func TestServeIPv6(t *testing.T) {
	if c, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	} else {
		c.Close()
	}
	h := &protoRecorder{seen: map[string]Proto{}}
	s, _ := startServer(t, Config{Listen: []string{"127.0.0.1:0", "[::1]:0"}}, h)
	addrs := s.Addrs()
	if len(addrs) != 2 {
		t.Fatalf("Addrs = %v", addrs)
	}
	for i, c := range []struct {
		addr string
		want Proto // of UDP; TCP adds the TCP bit
	}{
		{addrs[0], UDP},
		{addrs[1], UDP | IPv6},
	} {
		for _, network := range []string{"udp", "tcp"} {
			want := c.want
			if network == "tcp" {
				want |= TCP
			}
			for _, kind := range []string{"hit", "miss"} {
				name := fmt.Sprintf("%s.%d.%s.", kind, i, network)
				mustExchange(t, network, c.addr, name)
				if got, ok := h.get(name); !ok || got != want {
					t.Errorf("%s %s via %s: Proto %v (seen %v), want %v", network, name, c.addr, got, ok, want)
				}
			}
		}
	}
}

// protoRecorder is a fakeHandler that records the Proto of every query
// by its first label.
type protoRecorder struct {
	fakeHandler
	mu   sync.Mutex
	seen map[string]Proto
}

func (p *protoRecorder) record(req []byte, proto Proto) {
	m := new(dns.Msg)
	if m.Unpack(req) == nil && len(m.Question) == 1 {
		p.mu.Lock()
		p.seen[m.Question[0].Name] = proto
		p.mu.Unlock()
	}
}

func (p *protoRecorder) get(name string) (Proto, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.seen[name]
	return v, ok
}

func (p *protoRecorder) ServeFast(dst, req []byte, proto Proto) ([]byte, bool) {
	p.record(req, proto)
	return p.fakeHandler.ServeFast(dst, req, proto)
}

func (p *protoRecorder) ServeSlow(ctx context.Context, dst, req []byte, proto Proto) []byte {
	p.record(req, proto)
	return p.fakeHandler.ServeSlow(ctx, dst, req, proto)
}

func TestUDPProto(t *testing.T) {
	v4 := unix.RawSockaddrInet6{Family: unix.AF_INET}
	mapped := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 192, 15: 1}}
	v6 := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: [16]byte{0: 0xfd, 15: 1}}
	almost := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: [16]byte{9: 1, 10: 0xff, 11: 0xff, 15: 1}}
	for _, c := range []struct {
		name string
		sa   unix.RawSockaddrInet6
		want Proto
	}{{"v4", v4, UDP}, {"mapped", mapped, UDP}, {"v6", v6, UDP | IPv6}, {"not mapped", almost, UDP | IPv6}} {
		if got := udpProto(&c.sa); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPanicAnsweredServfail(t *testing.T) {
	s, set := startServer(t, Config{}, &fakeHandler{})
	addr := s.Addrs()[0]
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"panic.example.", "slowpanic.example."} {
			r := mustExchange(t, network, addr, name)
			if r.Rcode != dns.RcodeServerFailure || len(r.Question) != 1 || r.Question[0].Name != name {
				t.Errorf("%s %s: got %v, want SERVFAIL with the question", network, name, r)
			}
		}
	}
	if got := metricstest.Value(t, set, "nodedns_server_panics_total"); got != 4 {
		t.Errorf("panics = %v, want 4", got)
	}
	// Still serving.
	mustExchange(t, "udp", addr, "hit.after.")
}

func TestOversizedResponseServfail(t *testing.T) {
	s, _ := startServer(t, Config{}, &fakeHandler{})
	for _, network := range []string{"udp", "tcp"} {
		r := mustExchange(t, network, s.Addrs()[0], "big.example.")
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: rcode %d, want SERVFAIL", network, r.Rcode)
		}
	}
}

func TestDropped(t *testing.T) {
	s, _ := startServer(t, Config{}, &fakeHandler{})
	_, err := exchange(t, "udp", s.Addrs()[0], "drop.example.")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("drop: err = %v, want a timeout", err)
	}
}

func TestMalformedPackets(t *testing.T) {
	s, set := startServer(t, Config{}, &fakeHandler{})
	addr := s.Addrs()[0]
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range [][]byte{
		{},                  // empty
		{1, 2, 3},           // shorter than a header
		make([]byte, 12),    // header only
		make([]byte, 5000),  // larger than maxUDPRequest: truncated, dropped
		make([]byte, 65000), // near the datagram limit
	} {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// A length prefix shorter than a header, then a cut message.
	_, _ = tc.Write([]byte{0, 3, 1, 2, 3, 0, 200, 1})
	tc.Close()
	mustExchange(t, "udp", addr, "hit.still.serving.")
	mustExchange(t, "tcp", addr, "hit.still.serving.")
	// The runts may have gone to another of the SO_REUSEPORT sockets.
	waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_dropped_total") >= 3 })
}

func TestOverloaded(t *testing.T) {
	h := &fakeHandler{gate: make(chan struct{})}
	s, set := startServer(t, Config{MaxInflight: 1}, h)
	addr := s.Addrs()[0]
	first := make(chan *dns.Msg, 1)
	go func() { r, _ := exchange(t, "udp", addr, "miss.one."); first <- r }()
	waitFor(t, func() bool { return h.slow.Load() == 1 })
	if v := metricstest.Value(t, set, "nodedns_server_inflight"); v != 1 {
		t.Errorf("inflight gauge = %v, want 1", v)
	}
	for _, network := range []string{"udp", "tcp"} {
		r := mustExchange(t, network, addr, "miss.two.")
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: over max-inflight: rcode %d, want SERVFAIL", network, r.Rcode)
		}
	}
	close(h.gate)
	if r := <-first; r == nil || r.Rcode != dns.RcodeSuccess {
		t.Errorf("first miss: %v", r)
	}
	if got := metricstest.Value(t, set, "nodedns_server_overloaded_total"); got != 2 {
		t.Errorf("overloaded = %v, want 2", got)
	}
	if got := metricstest.Value(t, set, refusedSeries("inflight_total")); got != 2 {
		t.Errorf("refused inflight_total = %v, want 2", got)
	}
	waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_inflight") == 0 })
	want := `
# HELP nodedns_server_overloaded_total Misses answered without resolution because max-inflight misses were already running, over all clients or of the client, or the limit lowered for a standing queue.
# TYPE nodedns_server_overloaded_total counter
nodedns_server_overloaded_total 2
`
	var page bytes.Buffer
	metrics.Handler(set)(&page)
	if !strings.Contains(page.String(), want) {
		t.Errorf("/metrics lacks%s", want)
	}
}

// TestTCPPipelineOutOfOrder sends a slow miss then a hit on one connection:
// the hit must come back first (RFC 7766 section 6.2.1.1).
func TestTCPPipelineOutOfOrder(t *testing.T) {
	h := &fakeHandler{gate: make(chan struct{})}
	s, _ := startServer(t, Config{}, h)
	conn, err := dns.Dial("tcp", s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q1 := new(dns.Msg).SetQuestion("miss.first.", dns.TypeA)
	q2 := new(dns.Msg).SetQuestion("hit.second.", dns.TypeA)
	for _, q := range []*dns.Msg{q1, q2} {
		if err := conn.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	r, err := conn.ReadMsg()
	if err != nil || r.Id != q2.Id {
		t.Fatalf("first answer: %v %v, want the hit", r, err)
	}
	close(h.gate)
	r, err = conn.ReadMsg()
	if err != nil || r.Id != q1.Id {
		t.Fatalf("second answer: %v %v, want the miss", r, err)
	}
}

func TestTCPIdleTimeout(t *testing.T) {
	s, set := startServer(t, Config{TCPIdleTimeout: 100 * time.Millisecond}, &fakeHandler{})
	c, err := net.Dial("tcp", s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_tcp_connections") == 1 })
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from an idle connection: want EOF")
	}
	waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_tcp_connections") == 0 })
}

// TestTCPIdleWhileMissPending keeps a connection open past the idle timeout
// while its answer is being resolved.
func TestTCPIdleWhileMissPending(t *testing.T) {
	h := &fakeHandler{delay: 300 * time.Millisecond}
	s, _ := startServer(t, Config{TCPIdleTimeout: 100 * time.Millisecond}, h)
	r := mustExchange(t, "tcp", s.Addrs()[0], "miss.slow.")
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("got %v", r)
	}
}

// TestTCPConnLimit: with every connection slot taken, a new connection
// closes the oldest idle one (RFC 7766 section 6.2.3) and is served; it
// is refused only when no connection is idle (one owes an answer).
func TestTCPConnLimit(t *testing.T) {
	h := &fakeHandler{gate: make(chan struct{})}
	s, set := startServer(t, Config{MaxTCPConns: 1}, h)
	addr := s.Addrs()[0]
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	waitFor(t, func() bool { return metricstest.Value(t, set, "nodedns_server_tcp_connections") == 1 })
	// c1 is idle: the next connection takes its slot.
	c2 := &dns.Conn{Conn: dialTCP(t, addr)}
	defer c2.Close()
	if !waitClosed(c1, 3*time.Second) {
		t.Fatal("idle connection not closed for a new one")
	}
	if got := metricstest.Value(t, set, "nodedns_server_tcp_evicted_total"); got != 1 {
		t.Errorf("evicted = %v, want 1", got)
	}
	// c2 now owes an answer (its miss waits for the gate): not idle.
	if err := c2.WriteMsg(new(dns.Msg).SetQuestion("miss.slow.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.slow.Load() == 1 })
	c3 := dialTCP(t, addr)
	defer c3.Close()
	if !waitClosed(c3, 3*time.Second) {
		t.Fatal("third connection: want it closed, the only other one is busy")
	}
	if got := metricstest.Value(t, set, "nodedns_server_tcp_rejected_total"); got != 1 {
		t.Errorf("rejected = %v, want 1", got)
	}
	close(h.gate)
	_ = c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if r, err := c2.ReadMsg(); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Errorf("busy connection's answer: %v %v", r, err)
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAddressInUse(t *testing.T) {
	// A socket without SO_REUSEPORT holds the address.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	addr := pc.LocalAddr().String()
	s, err := New(Config{Listen: []string{addr}}, &fakeHandler{}, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start: %v, want an error naming %s and 'address already in use'", err, addr)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		listen []string
		want   string
	}{
		{nil, "no listen address"},
		{[]string{"127.0.0.1"}, "missing port"},
		{[]string{"localhost:53"}, "not an IP address"},
		{[]string{"0.0.0.0:53"}, "wildcard"},
		{[]string{"127.0.0.1:53", "127.0.0.1:053"}, "given twice"},
		{[]string{"127.0.0.1:99999"}, "port"},
		{[]string{"127.0.0.1:53", "[::1]:53"}, ""},
	} {
		t.Run(strings.Join(tc.listen, ","), func(t *testing.T) {
			err := Config{Listen: tc.listen}.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestShutdownDrains shuts down while a miss is in flight: the answer still
// goes out, and Shutdown returns only after it.
func TestShutdownDrains(t *testing.T) {
	h := &fakeHandler{delay: 200 * time.Millisecond}
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}}, h, zaptest.NewLogger(t), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addrs()[0]
	var wg sync.WaitGroup
	results := make(chan error, 2)
	for _, network := range []string{"udp", "tcp"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := exchange(t, network, addr, "miss.drain.")
			results <- err
		}()
	}
	waitFor(t, func() bool { return h.slow.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Errorf("in-flight query lost: %v", err)
		}
	}
	// Closed: a fresh socket can take the port without SO_REUSEPORT.
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatalf("port still held after Shutdown: %v", err)
	}
	pc.Close()
}

func TestShutdownTimeout(t *testing.T) {
	h := &fakeHandler{gate: make(chan struct{})}
	s, _ := startServer(t, Config{}, h)
	go func() { _, _ = exchange(t, "udp", s.Addrs()[0], "miss.stuck.") }()
	waitFor(t, func() bool { return h.slow.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
}

// cutHandler's misses wait until their context is cancelled, then answer
// SERVFAIL, as the resolver answers a miss whose wait is cut short.
type cutHandler struct{ fakeHandler }

func (h *cutHandler) ServeSlow(ctx context.Context, dst, req []byte, _ Proto) []byte {
	h.slow.Add(1)
	<-ctx.Done()
	dst = answer(dst, req)
	dst[3] = dst[3]&0xF0 | dns.RcodeServerFailure
	return dst
}

// TestShutdownAnswersCutMisses: misses still waiting when Shutdown's
// deadline nears are cancelled before it, and their answers reach the
// clients over UDP and TCP before the sockets close.
func TestShutdownAnswersCutMisses(t *testing.T) {
	h := &cutHandler{}
	s, _ := startServer(t, Config{}, h)
	addr := s.Addrs()[0]
	type result struct {
		rcode int
		err   error
	}
	results := make(chan result, 2)
	for _, network := range []string{"udp", "tcp"} {
		go func() {
			r, err := exchange(t, network, addr, "miss.cut.")
			if err != nil {
				results <- result{-1, err}
				return
			}
			results <- result{r.Rcode, nil}
		}()
	}
	waitFor(t, func() bool { return h.slow.Load() == 2 })
	const timeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := s.Shutdown(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want deadline exceeded", err)
	}
	if took > timeout+100*time.Millisecond {
		t.Errorf("Shutdown took %v, want at most its deadline (%v)", took, timeout)
	}
	for range 2 {
		if r := <-results; r.err != nil || r.rcode != dns.RcodeServerFailure {
			t.Errorf("miss cut short by the shutdown: rcode %d, error %v; want SERVFAIL", r.rcode, r.err)
		}
	}
}

// TestInherited serves from the sockets of another server: the seam for
// handing sockets to a newer instance.
func TestInherited(t *testing.T) {
	old, _ := startServer(t, Config{UDPSockets: 2}, &fakeHandler{})
	addr := old.Addrs()[0]
	files, err := old.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("Files: %d, want 2 UDP + 1 TCP", len(files))
	}
	s, _ := startServer(t, Config{Listen: []string{addr}, UDPSockets: 1, Inherited: files}, &fakeHandler{})
	if got := s.Addrs()[0]; got != addr {
		t.Fatalf("Addrs = %s, want %s", got, addr)
	}
	if len(s.udp) != 2 {
		t.Errorf("udp sockets = %d, want the 2 inherited", len(s.udp))
	}
	old.StopReading()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustExchange(t, "udp", addr, "hit.inherited.")
		mustExchange(t, "tcp", addr, "miss.inherited.")
	}
}

func TestStartTwice(t *testing.T) {
	s, _ := startServer(t, Config{}, &fakeHandler{})
	if err := s.Start(); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServfail(t *testing.T) {
	q := new(dns.Msg).SetQuestion("example.org.", dns.TypeAAAA)
	q.SetEdns0(1232, true)
	req, _ := q.Pack()
	resp := servfail(make([]byte, 0, 512), req)
	var m dns.Msg
	if err := m.Unpack(resp); err != nil {
		t.Fatal(err)
	}
	if !m.Response || m.Rcode != dns.RcodeServerFailure || m.Id != q.Id || !m.RecursionDesired ||
		len(m.Question) != 1 || m.Question[0] != q.Question[0] || len(m.Extra) != 0 {
		t.Fatalf("servfail = %v", &m)
	}
	req[2] |= 0x80
	if servfail(nil, req) != nil {
		t.Error("answered a response")
	}
	if servfail(nil, req[:5]) != nil {
		t.Error("answered a runt")
	}
	_ = binary.BigEndian
}

func FuzzServfail(f *testing.F) {
	q := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
	req, _ := q.Pack()
	f.Add(req)
	f.Add(req[:12])
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12})
	f.Fuzz(func(t *testing.T, req []byte) {
		resp := servfail(nil, req)
		if resp == nil {
			return
		}
		if len(resp) < headerLen || resp[3]&0x0F != dns.RcodeServerFailure {
			t.Fatalf("bad servfail % x", resp)
		}
		var m dns.Msg
		if err := m.Unpack(resp); err != nil && resp[5] == 1 {
			t.Fatalf("unparsable servfail with a question: %v", err)
		}
	})
}

// TestTCPPipelineBounded pipelines many misses on one connection: all are
// answered, at most maxPendingPerConn at a time.
func TestTCPPipelineBounded(t *testing.T) {
	h := &fakeHandler{delay: 20 * time.Millisecond}
	s, _ := startServer(t, Config{}, h)
	conn, err := dns.Dial("tcp", s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 3 * maxPendingPerConn
	go func() {
		for i := range n {
			q := new(dns.Msg).SetQuestion("miss.pipelined.", dns.TypeA)
			q.Id = uint16(i)
			if err := conn.WriteMsg(q); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	seen := map[uint16]bool{}
	for range n {
		r, err := conn.ReadMsg()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(seen), err)
		}
		seen[r.Id] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct answers, want %d", len(seen), n)
	}
	if m := h.maxRunning.Load(); m > maxPendingPerConn {
		t.Errorf("%d misses of one connection ran at once, want <= %d", m, maxPendingPerConn)
	}
}

// TestLargestQuery: a padded query of maxUDPRequest bytes is answered, one
// byte more is dropped.
func TestLargestQuery(t *testing.T) {
	s, _ := startServer(t, Config{}, &fakeHandler{})
	for _, size := range []int{maxUDPRequest, maxUDPRequest + 1} {
		q := new(dns.Msg).SetQuestion("hit.padded.", dns.TypeA)
		q.SetEdns0(1232, false)
		base, _ := q.Pack()
		pad := &dns.EDNS0_PADDING{Padding: make([]byte, size-len(base)-4)} // 4: option code and length
		q.IsEdns0().Option = append(q.IsEdns0().Option, pad)
		wire, _ := q.Pack()
		if len(wire) != size {
			t.Fatalf("built %d bytes, want %d", len(wire), size)
		}
		c, err := net.Dial("udp", s.Addrs()[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(wire)
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(make([]byte, 2*maxUDPRequest))
		if answered := err == nil && n == size; answered != (size <= maxUDPRequest) {
			t.Errorf("%d-byte query: answered=%v (err %v)", size, answered, err)
		}
	}
}

// TestFreeBind binds addresses no interface holds (documentation ranges):
// the listeners come up before the node network assigns them.
func TestFreeBind(t *testing.T) {
	for _, addr := range []string{"192.0.2.53:0", "[2001:db8::53]:0"} {
		t.Run(addr, func(t *testing.T) {
			if strings.HasPrefix(addr, "[") {
				if c, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 on this machine: %v", err)
				} else {
					c.Close()
				}
			}
			s, err := New(Config{Listen: []string{addr}}, &fakeHandler{}, nil, metrics.NewSet())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(); err == nil {
				// net.ipv4.ip_nonlocal_bind (or the IPv6 one) is set here.
				_ = s.Shutdown(context.Background())
				t.Log("this machine allows non-local binds; FreeBind is not what makes the bind below work")
			}
			startServer(t, Config{Listen: []string{addr}, FreeBind: true}, &fakeHandler{})
		})
	}
}
