package server

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func refusedSeries(reason string) string {
	return metrics.Name("nodedns_server_refused_total", "reason", reason)
}

func TestSourceTable(t *testing.T) {
	var tab sourceTable
	a, b := v4Key([4]byte{10, 0, 0, 1}), v4Key([4]byte{10, 0, 0, 2})
	for i := range 3 {
		if !tab.take(a, srcMisses, 3) {
			t.Fatalf("take %d of 3 refused", i+1)
		}
	}
	if tab.take(a, srcMisses, 3) {
		t.Error("a fourth miss of a share of 3 was taken")
	}
	if !tab.take(a, srcConns, 1) || tab.take(a, srcConns, 1) {
		t.Error("connections are not counted apart from misses")
	}
	if !tab.take(b, srcMisses, 3) {
		t.Error("another client is refused")
	}
	if got := tab.held(a); got != (srcCounts{misses: 3, conns: 1}) {
		t.Errorf("a holds %+v", got)
	}
	if n := tab.missClients.Load(); n != 2 {
		t.Errorf("%d clients holding misses, want 2", n)
	}
	for range 3 {
		tab.give(a, srcMisses)
	}
	tab.give(a, srcConns)
	tab.give(a, srcConns) // one too many: no underflow
	tab.give(b, srcMisses)
	if n := tab.entries(); n != 0 {
		t.Errorf("%d entries left once every client gave all back, want 0", n)
	}
	if n := tab.missClients.Load(); n != 0 {
		t.Errorf("%d clients holding misses once all gave back, want 0", n)
	}
	if !tab.take(a, srcConns, 1) || tab.missClients.Load() != 0 {
		t.Error("a is refused after giving back, or a connection counts as a miss")
	}
}

// TestSourceTableConcurrent takes and gives from many goroutines and
// clients at once (run with -race): the counts end at zero and no client
// ever holds more than its share.
func TestSourceTableConcurrent(t *testing.T) {
	var tab sourceTable
	const share = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	over := 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := v4Key([4]byte{10, 0, byte(g % 4), 1})
			for range 2000 {
				if tab.take(k, srcMisses, share) {
					if tab.held(k).misses > share {
						mu.Lock()
						over++
						mu.Unlock()
					}
					tab.give(k, srcMisses)
				}
			}
		}()
	}
	wg.Wait()
	if over > 0 || tab.entries() != 0 || tab.missClients.Load() != 0 {
		t.Errorf("over the share %d times, %d entries left, %d clients holding misses", over, tab.entries(), tab.missClients.Load())
	}
}

func TestSourceKeys(t *testing.T) {
	var v4 unix.RawSockaddrInet6
	(*unix.RawSockaddrInet4)(unsafePointer(&v4)).Family = unix.AF_INET
	(*unix.RawSockaddrInet4)(unsafePointer(&v4)).Addr = [4]byte{192, 0, 2, 7}
	mapped := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 192, 14: 2, 15: 7}}
	v6 := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: [16]byte{0: 0xfd, 15: 1}}
	want4 := srcKey(net.ParseIP("192.0.2.7").To16())
	for _, c := range []struct {
		name string
		sa   *unix.RawSockaddrInet6
		want srcKey
	}{
		{"v4", &v4, want4},
		{"v4-mapped is the same client", &mapped, want4},
		{"v6", &v6, srcKey(net.ParseIP("fd00::1").To16())},
	} {
		if got := udpSource(c.sa); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, net.IP(got[:]), net.IP(c.want[:]))
		}
	}
}

func TestTCPIdleTimeoutScale(t *testing.T) {
	const base = 10 * time.Second
	for _, c := range []struct {
		open, limit int64
		base, want  time.Duration
	}{
		{0, 1000, base, base},
		{500, 1000, base, base},
		{501, 1000, base, base / 10},
		{750, 1000, base, base / 10},
		{751, 1000, base, 200 * time.Millisecond},
		{1000, 1000, base, 200 * time.Millisecond},
		{1000, 1000, 100 * time.Millisecond, 100 * time.Millisecond}, // never above the configured value
		{1000, 1000, time.Minute, 1200 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%d/%d of %v", c.open, c.limit, c.base), func(t *testing.T) {
			if got := tcpIdleTimeout(c.base, c.open, c.limit); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestSourceShareDefaults(t *testing.T) {
	for _, c := range []struct {
		cfg              Config
		inflight, tcpPer int
	}{
		{Config{}, 250, 125},
		{Config{MaxInflight: 4, MaxTCPConns: 2}, 1, 1},
		{Config{MaxInflight: 800, MaxInflightPerSource: 800, MaxTCPConnsPerSource: 3}, 800, 3},
	} {
		d := c.cfg.withDefaults()
		if d.MaxInflightPerSource != c.inflight || d.MaxTCPConnsPerSource != c.tcpPer {
			t.Errorf("%+v: per source %d misses, %d connections; want %d, %d", c.cfg, d.MaxInflightPerSource, d.MaxTCPConnsPerSource, c.inflight, c.tcpPer)
		}
	}
	for _, c := range []Config{
		{Listen: []string{"127.0.0.1:53"}, MaxInflight: 10, MaxInflightPerSource: 11},
		{Listen: []string{"127.0.0.1:53"}, MaxInflightPerSource: 2001},
		{Listen: []string{"127.0.0.1:53"}, MaxTCPConns: 10, MaxTCPConnsPerSource: 11},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error for a share over the total", c)
		}
	}
}

// TestInflightPerSource: a client at its share of misses gets the
// overload answer and is counted by reason; another client still gets
// its misses resolved, and the table empties when they are done.
func TestInflightPerSource(t *testing.T) {
	h := &fakeHandler{gate: make(chan struct{})}
	s, set := startServer(t, Config{MaxInflightPerSource: 1}, h)
	addr := s.Addrs()[0]
	first := make(chan error, 1)
	a, err := dialFrom(t, "udp", "127.0.0.2", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	go func() { _, err := udpQuery(a, "miss.a1."); first <- err }()
	waitFor(t, func() bool { return h.slow.Load() == 1 })
	a2, err := dialFrom(t, "udp", "127.0.0.2", addr) // the same client, another port
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	r, err := udpQuery(a2, "miss.a2.")
	if err != nil || r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("second miss of a client at its share: %v %v, want SERVFAIL", r, err)
	}
	b, err := dialFrom(t, "udp", "127.0.0.3", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	second := make(chan error, 1)
	go func() { _, err := udpQuery(b, "miss.b1."); second <- err }()
	waitFor(t, func() bool { return h.slow.Load() == 2 })
	close(h.gate)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Error(err)
		}
	}
	if got := metricstest.Value(t, set, refusedSeries("inflight_source")); got != 1 {
		t.Errorf("refused inflight_source = %v, want 1", got)
	}
	if got := metricstest.Value(t, set, refusedSeries("inflight_total")); got != 0 {
		t.Errorf("refused inflight_total = %v, want 0", got)
	}
	waitFor(t, func() bool { return s.sources.entries() == 0 })
}

// udpQuery sends one query for name on the connected socket c and reads
// the answer.
func udpQuery(c net.Conn, name string) (*dns.Msg, error) {
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	wire, _ := q.Pack()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(wire); err != nil {
		return nil, err
	}
	buf := make([]byte, 1232)
	n, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		return nil, err
	}
	if r.Id != q.Id {
		return nil, fmt.Errorf("%s: answer ID %d, want %d", name, r.Id, q.Id)
	}
	return r, nil
}

func unsafePointer(sa *unix.RawSockaddrInet6) unsafe.Pointer { return unsafe.Pointer(sa) }

// protoOverloaded records the Proto its Overloaded is called with.
type protoOverloaded struct {
	fakeHandler
	got chan Proto
}

func (p *protoOverloaded) Overloaded(dst, req []byte, proto Proto) []byte {
	p.got <- proto
	return p.fakeHandler.Overloaded(dst, req, proto)
}

// TestOverloadedProto: the handler learns how a refused query came, so
// that its answer over TCP is not truncated to the UDP limit.
func TestOverloadedProto(t *testing.T) {
	h := &protoOverloaded{fakeHandler: fakeHandler{gate: make(chan struct{})}, got: make(chan Proto, 2)}
	s, _ := startServer(t, Config{MaxInflight: 1}, h)
	defer close(h.gate)
	addr := s.Addrs()[0]
	go func() { _, _ = exchange(t, "udp", addr, "miss.holder.") }()
	waitFor(t, func() bool { return h.slow.Load() == 1 })
	for _, c := range []struct {
		network string
		want    Proto
	}{{"udp", UDP}, {"tcp", TCP}} {
		mustExchange(t, c.network, addr, "miss.refused.")
		if got := <-h.got; got != c.want {
			t.Errorf("%s: Overloaded got Proto %v, want %v", c.network, got, c.want)
		}
	}
}

// TestAcquireShareOfLoweredLimit: past a limit lowered for a standing
// queue, a client holding less than an equal share of it among the
// clients with misses is still admitted; the client that holds more is
// refused for the queue, and the configured limits still hold.
func TestAcquireShareOfLoweredLimit(t *testing.T) {
	s, set := startServer(t, Config{MaxInflight: 40, MaxInflightPerSource: 20}, &fakeHandler{})
	s.missLimit.Store(10)
	noisy, quiet, third := v4Key([4]byte{10, 0, 0, 1}), v4Key([4]byte{10, 0, 0, 2}), v4Key([4]byte{10, 0, 0, 3})
	for i := range 10 {
		if !admit(s, noisy) {
			t.Fatalf("miss %d under the limit refused", i+1)
		}
	}
	if admit(s, noisy) {
		t.Error("the only client was admitted past the limit")
	}
	// Two clients with misses: a share of 5 each.
	for i := range 5 {
		if !admit(s, quiet) {
			t.Fatalf("quiet client's miss %d refused under its share", i+1)
		}
	}
	if admit(s, quiet) {
		t.Error("quiet client admitted past its share of 5")
	}
	if admit(s, noisy) {
		t.Error("noisy client admitted past the limit, holding twice its share")
	}
	if !admit(s, third) {
		t.Error("a third client's first miss refused")
	}
	// Three clients: a share of 3. Seven more: a share of 1, but every
	// client may still hold the pair of queries a lookup sends at once.
	for i := range 7 {
		if !admit(s, v4Key([4]byte{10, 0, 1, byte(i)})) {
			t.Fatalf("client %d's first miss refused", i+4)
		}
	}
	if !admit(s, third) {
		t.Error("a client holding one miss refused the second of a pair")
	}
	if admit(s, third) {
		t.Error("a client holding two misses admitted past a share of one")
	}
	if got := metricstest.Value(t, set, refusedSeries("queue_delay")); got != 4 {
		t.Errorf("%v refused for the queue, want 4", got)
	}
	// Back at the configured limit, the per-source share applies again.
	s.missLimit.Store(40)
	for s.sources.held(noisy).misses < 20 {
		if !admit(s, noisy) {
			t.Fatalf("noisy refused at %d misses, under its share of 20", s.sources.held(noisy).misses)
		}
	}
	if admit(s, noisy) || metricstest.Value(t, set, refusedSeries("inflight_source")) != 1 {
		t.Error("client admitted past --max-inflight-per-source")
	}
}

// admit is acquire for a miss without a question: no domain share.
func admit(s *Server, k srcKey) bool {
	_, ok := s.acquire(k, nil)
	return ok
}
