package server

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestNextLimit(t *testing.T) {
	const most = 2000
	for _, c := range []struct {
		name            string
		limit, inflight int64
		short, standing bool
		want            int64
	}{
		{"standing queue: three quarters of the misses in flight", most, 1000, false, true, 750},
		{"standing queue, limit under in flight: three quarters of the limit", 400, 1000, false, true, 300},
		{"never under the floor", shedFloor + 2, 1000, false, true, shedFloor},
		{"neither short nor standing long enough: kept", 300, 1000, false, false, 300},
		{"short waits: an eighth more", 800, 1000, true, false, 900},
		{"small limits grow by at least half the floor", shedFloor, 0, true, false, shedFloor + shedFloor/2},
		{"never over the configured most", most - 10, 0, true, false, most},
	} {
		if got := nextLimit(c.limit, c.inflight, most, c.short, c.standing); got != c.want {
			t.Errorf("%s: nextLimit(%d, %d, %d, %v, %v) = %d, want %d", c.name, c.limit, c.inflight, most, c.short, c.standing, got, c.want)
		}
	}
}

// TestShedOneStandingSocket: a flood from one socket of a pod fills the
// queue of one of the server's sockets, hashed there by its ports, and
// leaves the others' empty. Reader a reads the standing queue; reader b
// reads short ones and closes its windows first. b's short waits must
// neither restart the count towards shedSustain nor raise the limit: it
// drops once a's queue has stood that long, and stays down while it
// stands; once a's waits are short as well, it rises.
func TestShedOneStandingSocket(t *testing.T) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, ShedDelay: 5 * time.Millisecond}, &fakeHandler{}, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	s.inflight.Store(1000)
	ms := int64(time.Millisecond)
	win := shedWindow.Nanoseconds()
	now := int64(1e18)
	var a, b delayWindow
	window := func(aDelay int64) int64 {
		s.missesStarted.Add(int64(shedMinStarted * runtime.GOMAXPROCS(0)))
		s.observeDelay(&b, now, 1*ms)
		s.observeDelay(&a, now+ms, aDelay)
		now += win
		return s.missLimit.Load()
	}
	window(9 * ms) // opens both windows
	start := now
	for now-start <= shedSustain.Nanoseconds()+win {
		window(9 * ms)
	}
	low := s.missLimit.Load()
	if low >= int64(DefaultMaxInflight) {
		t.Fatalf("one socket's queue standing for %v beside a quiet one: limit %d, want it lowered", time.Duration(now-start), low)
	}
	for range 8 {
		if got := window(9 * ms); got > low {
			t.Fatalf("one socket's queue still standing: limit rose from %d to %d", low, got)
		}
	}
	// a's next window still opens with a long wait; the one after that
	// is short, and two windows later no queue has stood.
	low = s.missLimit.Load()
	for range 3 {
		low = min(low, window(1*ms))
	}
	if got := window(1 * ms); got <= low {
		t.Fatalf("every queue short: limit %d, want it raised from %d", got, low)
	}
}

// TestObserveDelayWindows: a window closes with the first batch after its
// end and is judged by its smallest delay, and two readers closing
// windows at the same time move the limit once.
func TestObserveDelayWindows(t *testing.T) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, ShedDelay: 5 * time.Millisecond}, &fakeHandler{}, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	s.inflight.Store(1000)
	busy := func() { s.missesStarted.Add(int64(shedMinStarted * runtime.GOMAXPROCS(0))) }
	ms := int64(time.Millisecond)
	win := shedWindow.Nanoseconds()
	now := int64(1e18)
	var a, b delayWindow
	s.observeDelay(&a, now, 9*ms) // opens a's first window
	s.observeDelay(&b, now, 9*ms)
	busy()
	s.observeDelay(&a, now+win/2, 1*ms) // one short wait: no standing queue
	s.observeDelay(&b, now+win/2, 8*ms)
	now += win
	s.observeDelay(&a, now, 9*ms)
	s.observeDelay(&b, now, 9*ms) // the same window: a moved the limit already
	if got := s.missLimit.Load(); got != int64(DefaultMaxInflight) {
		t.Fatalf("after a window with a 1ms wait: limit %d, want %d", got, DefaultMaxInflight)
	}
	now += win
	s.observeDelay(&b, now, 9*ms) // a standing window, but few misses started
	s.observeDelay(&a, now, 9*ms)
	if got := s.missLimit.Load(); got != int64(DefaultMaxInflight) {
		t.Fatalf("after a standing window that started few misses: limit %d, want %d", got, DefaultMaxInflight)
	}
	// Standing windows that start many misses: the limit drops once the
	// queue has stood for shedSustain.
	first := now + win
	for {
		busy()
		now += win
		s.observeDelay(&b, now, 9*ms)
		s.observeDelay(&a, now, 9*ms)
		got := s.missLimit.Load()
		if now-first < shedSustain.Nanoseconds() {
			if got != int64(DefaultMaxInflight) {
				t.Fatalf("the queue standing for %v: limit %d, want %d", time.Duration(now-first), got, DefaultMaxInflight)
			}
			continue
		}
		if got != 750 {
			t.Fatalf("the queue standing for %v: limit %d, want 750", time.Duration(now-first), got)
		}
		break
	}
}

// TestShedIgnoresStartBacklog: a server that starts reading with a
// standing queue (the backlog a socket holder kept across a crash, then
// the misses of a cold cache) keeps its limit for shedArmAfter, short
// windows or not, and lowers it for a queue that stands after that.
func TestShedIgnoresStartBacklog(t *testing.T) {
	ms := int64(time.Millisecond)
	win := shedWindow.Nanoseconds()
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, ShedDelay: 5 * time.Millisecond}, &fakeHandler{}, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	s.inflight.Store(1000)
	now := int64(1e18)
	s.readStart = now
	var w delayWindow
	window := func(delay int64) int64 {
		s.missesStarted.Add(int64(shedMinStarted * runtime.GOMAXPROCS(0)))
		s.observeDelay(&w, now, delay)
		now += win
		return s.missLimit.Load()
	}
	window(900 * ms) // opens the first window
	for i := 0; now < s.readStart+shedArmAfter.Nanoseconds(); i++ {
		d := 900 * ms
		if i == 20 {
			d = 1 * ms // the backlog read: a short window
		}
		if got := window(d); got != int64(DefaultMaxInflight) {
			t.Fatalf("%v after the start: limit %d, want %d", time.Duration(now-s.readStart), got, DefaultMaxInflight)
		}
	}
	if got := window(9 * ms); got != 750 {
		t.Fatalf("a queue standing %v after the start: limit %d, want 750", time.Duration(now-s.readStart), got)
	}
}

// TestShedLateReader: a reader so short of CPU that its batches come
// further apart than a window, each having waited long, sees a standing
// queue, not an empty one; a gap whose next batch did not wait is idle.
func TestShedLateReader(t *testing.T) {
	ms := int64(time.Millisecond)
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, ShedDelay: 5 * time.Millisecond}, &fakeHandler{}, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	s.inflight.Store(1000)
	now := int64(1e18)
	var w delayWindow
	s.observeDelay(&w, now, 60*ms)
	for range 5 { // 300ms of batches 60ms apart, each 60ms late
		s.missesStarted.Add(int64(shedMinStarted * runtime.GOMAXPROCS(0)))
		now += 60 * ms
		s.observeDelay(&w, now, 60*ms)
	}
	if got := s.missLimit.Load(); got >= int64(DefaultMaxInflight) {
		t.Fatalf("a late reader: limit %d, want it lowered", got)
	}
	low := s.missLimit.Load()
	now += 60 * ms
	s.observeDelay(&w, now, 0) // the next datagram after a quiet gap
	if got := s.missLimit.Load(); got <= low {
		t.Fatalf("an idle gap: limit %d, want it raised from %d", got, low)
	}
}

func TestArrival(t *testing.T) {
	ctrl := make([]byte, stampCtrlLen)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
	h.SetLen(unix.CmsgLen(sizeofTimespec))
	ts := (*unix.Timespec)(unsafe.Pointer(&ctrl[unix.CmsgLen(0)]))
	*ts = unix.NsecToTimespec(1_700_000_000_123_456_789)
	if got := arrival(ctrl); got != 1_700_000_000_123_456_789 {
		t.Errorf("arrival = %d", got)
	}
	for name, bad := range map[string]func(c []byte){
		"short":      func(c []byte) { clear(c[unix.CmsgLen(0):]) },
		"other type": func(c []byte) { (*unix.Cmsghdr)(unsafe.Pointer(&c[0])).Type = unix.SCM_RIGHTS },
		"other lvl":  func(c []byte) { (*unix.Cmsghdr)(unsafe.Pointer(&c[0])).Level = unix.SOL_IP },
		"short len":  func(c []byte) { (*unix.Cmsghdr)(unsafe.Pointer(&c[0])).SetLen(unix.CmsgLen(0)) },
	} {
		c := append([]byte(nil), ctrl...)
		bad(c)
		if name == "short" {
			c = c[:unix.CmsgLen(0)]
		}
		if got := arrival(c); got != 0 {
			t.Errorf("%s: arrival = %d, want 0", name, got)
		}
	}
	if got := arrival(nil); got != 0 {
		t.Errorf("no control data: arrival = %d, want 0", got)
	}
	for _, c := range []struct{ now, at, want int64 }{
		{now: 100, at: 0, want: -1},
		{now: 100, at: 40, want: 60},
		{now: 100, at: 101, want: 0},
		{now: 100 + maxStampAge + 1, at: 100, want: -1},
	} {
		if got := queueDelay(c.now, c.at); got != c.want {
			t.Errorf("queueDelay(%d, %d) = %d, want %d", c.now, c.at, got, c.want)
		}
	}
}

// costlyHandler makes the reader slow: every ServeFast spins for cost,
// as a reader short of CPU would be. Names starting with 'h' are hits;
// every other is a miss. Names starting with 'q' (a quiet client's) are
// resolved at once; the others take missDelay when it is set, else wait
// for release (or are answered at once when release is nil), so that
// misses stay in flight.
type costlyHandler struct {
	fakeHandler
	cost      time.Duration
	missDelay time.Duration
	release   chan struct{}
}

func (h *costlyHandler) ServeFast(dst, req []byte, _ Proto) ([]byte, bool) {
	for start := time.Now(); time.Since(start) < h.cost; {
	}
	if len(req) > 13 && req[13] == 'h' {
		return answer(dst, req), true
	}
	return nil, false
}

func (h *costlyHandler) ServeSlow(ctx context.Context, dst, req []byte, _ Proto) []byte {
	switch {
	case len(req) > 13 && req[13] == 'q':
	case h.missDelay > 0:
		select {
		case <-time.After(h.missDelay):
		case <-ctx.Done():
		}
	case h.release != nil:
		select {
		case <-h.release:
		case <-ctx.Done():
		}
	}
	return answer(dst, req)
}

// floodQueue sends queries for name to addr from sources 127.0.0.2-9 at
// about rate queries a second for d, reading and dropping the answers.
func floodQueue(t *testing.T, addr, name string, rate int, d time.Duration) {
	t.Helper()
	var srcs []string
	for i := 2; i < 10; i++ {
		srcs = append(srcs, net.IPv4(127, 0, 0, byte(i)).String())
	}
	floodQueueFrom(t, srcs, addr, name, rate, d)
}

// floodQueueFrom is floodQueue from the loopback addresses srcs.
func floodQueueFrom(t *testing.T, srcs []string, addr, name string, rate int, d time.Duration) {
	t.Helper()
	var conns []net.Conn
	for _, src := range srcs {
		c, err := dialFrom(t, "udp", src, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			buf := make([]byte, 1500)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
		conns = append(conns, c)
	}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	q, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	const tick = time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	sent := 0
	for start := time.Now(); time.Since(start) < d; {
		for range perTick {
			q[0], q[1] = byte(sent>>8), byte(sent)
			_, _ = conns[sent%len(conns)].Write(q)
			sent++
		}
		time.Sleep(tick)
	}
}

// delayedOver is how many batches waited longer than the bound (one of
// the histogram's).
func delayedOver(t *testing.T, set *vm.Set, le string) float64 {
	t.Helper()
	all := metricstest.Value(t, set, "nodedns_server_udp_queue_delay_seconds_count")
	under := metricstest.Value(t, set, `nodedns_server_udp_queue_delay_seconds_bucket{le="`+le+`"}`)
	return all - under
}

// TestShedStandingQueue: a reader that takes 300µs a query, sent 8,000
// misses a second that stay in flight, falls behind: its datagrams wait
// ever longer in the socket's queue. It must then refuse new misses for
// the queue's delay (answered by Overloaded); with shedding off it must
// not, though the queue is the same.
func TestShedStandingQueue(t *testing.T) {
	for _, c := range []struct {
		name string
		shed time.Duration
	}{{"on", 2 * time.Millisecond}, {"off", 0}} {
		t.Run(c.name, func(t *testing.T) {
			h := &costlyHandler{cost: 300 * time.Microsecond, release: make(chan struct{})}
			// One name from every client: its domain's share is lifted,
			// this is about the queue.
			s, set := startServer(t, Config{UDPSockets: 1, ShedDelay: c.shed, shedArmAfter: time.Nanosecond,
				MaxInflightPerDomain: DefaultMaxInflight}, h)
			t.Cleanup(func() { close(h.release) })
			floodQueue(t, s.Addrs()[0], "miss.example.", 8000, 700*time.Millisecond)
			shed := refusedSeries("queue_delay")
			if c.shed > 0 {
				waitFor(t, func() bool { return metricstest.Value(t, set, shed) > 0 })
			} else {
				time.Sleep(200 * time.Millisecond)
			}
			if n := delayedOver(t, set, "0.01"); n == 0 {
				t.Fatalf("no batch waited over 10ms: the reader kept up, the test shows nothing")
			}
			got := metricstest.Value(t, set, shed)
			switch {
			case c.shed > 0 && got == 0:
				t.Errorf("standing queue, %d misses in flight: no miss shed", s.inflight.Load())
			case c.shed < 0 && got != 0:
				t.Errorf("shedding off: %v misses shed", got)
			}
			if got > 0 && metricstest.Value(t, set, "nodedns_server_overloaded_total") < got {
				t.Errorf("shed misses not counted as overloaded")
			}
			t.Logf("shed %v misses; %v refused for the client's share; limit now %v", got,
				metricstest.Value(t, set, refusedSeries("inflight_source")),
				metricstest.Value(t, set, "nodedns_server_inflight_limit"))
		})
	}
}

// TestNoShedFewMisses: the same slow reader, flooded with hits, while a
// few misses a second hang (names whose servers never answer): the queue
// stands and a hundred misses are in flight, but so few start that
// refusing them would not shorten the queue, so none is refused.
func TestNoShedFewMisses(t *testing.T) {
	h := &costlyHandler{cost: 300 * time.Microsecond, release: make(chan struct{})}
	s, set := startServer(t, Config{UDPSockets: 1, ShedDelay: 2 * time.Millisecond, shedArmAfter: time.Nanosecond}, h)
	t.Cleanup(func() { close(h.release) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		floodQueue(t, s.Addrs()[0], "miss.example.", 300, 700*time.Millisecond)
	}()
	floodQueue(t, s.Addrs()[0], "hit.example.", 8000, 700*time.Millisecond)
	<-done
	time.Sleep(200 * time.Millisecond)
	if n := delayedOver(t, set, "0.01"); n == 0 {
		t.Fatalf("no batch waited over 10ms: the reader kept up, the test shows nothing")
	}
	if n := s.inflight.Load(); n < shedFloor {
		t.Fatalf("%d misses in flight: the test shows nothing", n)
	}
	if got := metricstest.Value(t, set, refusedSeries("queue_delay")); got != 0 {
		t.Errorf("%v misses refused, %d in flight, though few started", got, s.inflight.Load())
	}
}

// TestNoShedKeepingUp: a reader that keeps up (no cost per query) is
// sent misses that stay in flight: no standing queue, nothing shed.
func TestNoShedKeepingUp(t *testing.T) {
	h := &costlyHandler{release: make(chan struct{})}
	s, set := startServer(t, Config{UDPSockets: 1, shedArmAfter: time.Nanosecond}, h)
	t.Cleanup(func() { close(h.release) })
	floodQueue(t, s.Addrs()[0], "miss.example.", 2000, 500*time.Millisecond)
	if s.inflight.Load() < shedFloor {
		t.Fatalf("%d misses in flight: the test shows nothing", s.inflight.Load())
	}
	if got := metricstest.Value(t, set, refusedSeries("queue_delay")); got != 0 {
		t.Errorf("%v misses shed by a reader that keeps up (queue delay over 5ms in %v batches)", got, delayedOver(t, set, "0.005"))
	}
}

// TestShedSparesQuietClients: one client floods a slow reader with misses
// that take 50ms each, so that the queue stands and the limit on misses
// in flight drops under what the flood would hold, and the flood fills
// it. Twenty other clients then ask a new name each every 20ms. Each
// holds far less than its share of the lowered limit, so their misses
// must be resolved, not answered SERVFAIL, while the flooding client's
// are refused for the queue's delay. With one limit for all, nearly every
// quiet miss would find it full. With two sockets the flood, from one
// socket of its own, fills the queue of one of them, and the quiet
// clients' queries on the other, read at once, must not raise the limit.
func TestShedSparesQuietClients(t *testing.T) {
	for _, sockets := range []int{1, 2} {
		t.Run(fmt.Sprintf("sockets=%d", sockets), func(t *testing.T) { testShedSparesQuietClients(t, sockets) })
	}
}

func testShedSparesQuietClients(t *testing.T, sockets int) {
	const quietQueries = 25
	h := &costlyHandler{cost: 300 * time.Microsecond, missDelay: 50 * time.Millisecond}
	// A buffer of a few hundred queries: a queue of some 100ms, so that
	// the quiet clients' answers come back while the flood goes on.
	s, set := startServer(t, Config{UDPSockets: sockets, ReadBuffer: 256 << 10, ShedDelay: 2 * time.Millisecond, shedArmAfter: time.Nanosecond}, h)
	addr := s.Addrs()[0]
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		floodQueueFrom(t, []string{"127.0.0.2"}, addr, "miss.example.", 8000, 4*time.Second)
	}()
	defer func() { <-flooding }()
	// The flood would keep some 160 misses in flight; the limit settles
	// where misses start too slowly for the queue to be blamed on them.
	const lowered = 100
	waitFor(t, func() bool { return s.missLimit.Load() <= lowered })
	shedBefore := metricstest.Value(t, set, refusedSeries("queue_delay"))
	var highest int64 // read once sampled is closed
	quiet := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			highest = max(highest, s.missLimit.Load())
			select {
			case <-quiet:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var answered, failed atomic.Int64
	var wg sync.WaitGroup
	for i := 20; i < 40; i++ {
		c, err := dialFrom(t, "udp", net.IPv4(127, 0, 0, byte(i)).String(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The queue stands, so answers come late: read them until 2s
		// after the last query, each ID once.
		_ = c.SetReadDeadline(time.Now().Add(2500 * time.Millisecond))
		wg.Go(func() {
			var seen [quietQueries]bool
			buf := make([]byte, 1500)
			for {
				k, err := c.Read(buf)
				if err != nil {
					return
				}
				r := new(dns.Msg)
				if r.Unpack(buf[:k]) != nil || r.Id >= quietQueries || seen[r.Id] {
					continue
				}
				seen[r.Id] = true
				answered.Add(1)
				if r.Rcode != dns.RcodeSuccess {
					failed.Add(1)
				}
			}
		})
		wg.Go(func() {
			for n := range uint16(quietQueries) {
				m := new(dns.Msg)
				m.SetQuestion(fmt.Sprintf("q%d-%d.example.", i, n), dns.TypeA)
				m.Id = n
				q, _ := m.Pack()
				_, _ = c.Write(q)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(quiet)
	<-sampled
	shed := metricstest.Value(t, set, refusedSeries("queue_delay")) - shedBefore
	if answered.Load() < 50 {
		t.Fatalf("%d quiet queries answered of %d: the test shows nothing", answered.Load(), 20*quietQueries)
	}
	if shed == 0 {
		t.Fatalf("no flood miss refused while the quiet clients asked: the limit was not in force")
	}
	if f := failed.Load(); f*20 > answered.Load() {
		t.Errorf("quiet clients: %d of %d answered misses failed (limit %v, %v of the flood's shed meanwhile)",
			f, answered.Load(), metricstest.Value(t, set, "nodedns_server_inflight_limit"), shed)
	}
	if highest > 2*lowered {
		t.Errorf("the flood's queue standing: limit rose to %d while the quiet clients asked", highest)
	}
	t.Logf("quiet clients: %d of %d answered misses failed; %v flood misses shed meanwhile; limit at most %d",
		failed.Load(), answered.Load(), shed, highest)
}
