package holder

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// relayA is the address the fake relay target answers for every name but
// bigName, so that its answers tell from the echo frontend's (no answer
// section).
const (
	relayA  = "192.0.2.53"
	bigName = "big.example."
)

// target is a fake relay address: a DNS server over TCP on loopback.
type target struct {
	addr    string
	queries atomic.Int64
}

func startTarget(t *testing.T) *target {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{addr: l.Addr().String()}
	srv := &dns.Server{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		tg.queries.Add(1)
		m := new(dns.Msg).SetReply(q)
		name := q.Question[0].Name
		if name == bigName {
			// About 6 KB: more than any UDP size below 4096.
			for range 60 {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 30}, Txt: []string{strings.Repeat("x", 90)}})
			}
		} else {
			rr, _ := dns.NewRR(name + " 30 IN A " + relayA)
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return tg
}

// silentTarget is a relay address that completes TCP handshakes (the
// kernel's, from the backlog) and never reads nor answers: a hung server.
func silentTarget(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// downTarget is a relay address nothing listens on: connections refused.
func downTarget(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// relayingHolder runs a holder relaying to relay, supplied by a frontend
// on loopback (2 UDP sockets and a TCP listener) that then dies, and
// waits until it relays. It returns the holder, its directory and the
// frontend's address.
func relayingHolder(t *testing.T, relay []string, mod func(*Config)) (*Holder, string, string) {
	t.Helper()
	return relayingHolderOn(t, "127.0.0.1:0", relay, mod)
}

// relayingHolderOn is relayingHolder with a frontend listening on listen.
func relayingHolderOn(t *testing.T, listen string, relay []string, mod func(*Config)) (*Holder, string, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{Dir: dir, Timeout: time.Minute, Relay: relay, RelayAfter: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, _ := startHolderConfig(t, cfg)
	f := startFrontend(t, dir, []string{listen})
	addr := f.srv.Addrs()[0]
	waitHeld(t, h, 3)
	f.die()
	deadline := time.Now().Add(2 * time.Second)
	for !h.relaying() {
		if time.Now().After(deadline) {
			t.Fatal("the holder does not relay 2s after its frontend died")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return h, dir, addr
}

func (h *Holder) relaying() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.relay != nil
}

// ask sends q over network ("udp" or "tcp") and returns the answer and
// how long it took.
func ask(t *testing.T, network, addr string, q *dns.Msg) (*dns.Msg, time.Duration) {
	t.Helper()
	c := dns.Client{Net: network, Timeout: 6 * time.Second}
	start := time.Now()
	r, _, err := c.Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v after %v", network, q.Question[0].Name, err, time.Since(start))
	}
	return r, time.Since(start)
}

// TestRelayAnswersForDeadFrontend: once the frontend is dead past
// RelayAfter, its UDP and TCP sockets are answered through the relay
// address, with the query's ID and question, also past the hold timeout.
func TestRelayAnswersForDeadFrontend(t *testing.T) {
	tg := startTarget(t)
	h, _, addr := relayingHolder(t, []string{tg.addr}, func(c *Config) { c.Timeout = 100 * time.Millisecond })
	time.Sleep(300 * time.Millisecond) // past the hold timeout
	for i, network := range []string{"udp", "tcp", "udp", "tcp"} {
		q := new(dns.Msg).SetQuestion("svc.example.", dns.TypeA)
		q.Id = uint16(1000 + i)
		r, _ := ask(t, network, addr, q)
		if r.Id != q.Id || len(r.Question) != 1 || r.Question[0] != q.Question[0] {
			t.Errorf("%s: answer %d %v to query %d %v", network, r.Id, r.Question, q.Id, q.Question)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), relayA) {
			t.Errorf("%s: answer %v, want the relay target's %s", network, r, relayA)
		}
	}
	if n := tg.queries.Load(); n != 4 {
		t.Errorf("the target got %d queries, want 4", n)
	}
	if h.Held() != 3 {
		t.Errorf("holder holds %d sockets while relaying past the hold timeout, want 3", h.Held())
	}
}

// TestRelayServfail: with the relay addresses down or hung, each query
// gets SERVFAIL within RelayTimeout, never silence; a hung first address
// leaves time for a working second one.
func TestRelayServfail(t *testing.T) {
	const bound = 600 * time.Millisecond
	tg := startTarget(t)
	for _, tc := range []struct {
		name  string
		relay []string
		rcode int
		max   time.Duration
	}{
		{"down", []string{downTarget(t)}, dns.RcodeServerFailure, 200 * time.Millisecond},
		{"hung", []string{silentTarget(t)}, dns.RcodeServerFailure, bound + 200*time.Millisecond},
		{"down and hung", []string{downTarget(t), silentTarget(t)}, dns.RcodeServerFailure, bound + 200*time.Millisecond},
		{"hung then working", []string{silentTarget(t), tg.addr}, dns.RcodeSuccess, bound + 200*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, addr := relayingHolder(t, tc.relay, func(c *Config) { c.RelayTimeout = bound })
			for _, network := range []string{"udp", "tcp"} {
				r, took := ask(t, network, addr, new(dns.Msg).SetQuestion("svc.example.", dns.TypeA))
				if r.Rcode != tc.rcode {
					t.Errorf("%s: rcode %s, want %s", network, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
				if took > tc.max {
					t.Errorf("%s: answered after %v, want within %v", network, took, tc.max)
				}
				t.Logf("%s: %s after %v", network, dns.RcodeToString[r.Rcode], took.Round(time.Millisecond))
			}
		})
	}
}

// TestRelayDefaultBound: the default bound answers a query with hung relay
// addresses before glibc's 5s timeout.
func TestRelayDefaultBound(t *testing.T) {
	_, _, addr := relayingHolder(t, []string{silentTarget(t), silentTarget(t)}, nil)
	r, took := ask(t, "udp", addr, new(dns.Msg).SetQuestion("svc.example.", dns.TypeA))
	if r.Rcode != dns.RcodeServerFailure || took < DefaultRelayTimeout-100*time.Millisecond || took > DefaultRelayTimeout+500*time.Millisecond {
		t.Errorf("%s after %v, want SERVFAIL after about %v", dns.RcodeToString[r.Rcode], took, DefaultRelayTimeout)
	}
}

// TestRelayTruncates: an answer larger than the client's UDP size (512
// without EDNS0, else its EDNS0 size) comes truncated with TC; over TCP,
// whole.
func TestRelayTruncates(t *testing.T) {
	tg := startTarget(t)
	_, _, addr := relayingHolder(t, []string{tg.addr}, nil)
	for _, tc := range []struct {
		network string
		edns    uint16
		tc      bool
		max     int
	}{
		{"udp", 0, true, 512},
		{"udp", 1232, true, 1232},
		{"udp", 8192, false, 8192},
		{"tcp", 0, false, dns.MaxMsgSize},
	} {
		q := new(dns.Msg).SetQuestion(bigName, dns.TypeTXT)
		if tc.edns > 0 {
			q.SetEdns0(tc.edns, false)
		}
		r, _ := ask(t, tc.network, addr, q)
		r.Compress = true // the size as sent: compressed
		size := r.Len()
		if r.Truncated != tc.tc || size > tc.max || (!tc.tc && len(r.Answer) != 60) {
			t.Errorf("%s EDNS0 %d: TC %v, %d bytes, %d answers; want TC %v within %d bytes", tc.network, tc.edns, r.Truncated, size, len(r.Answer), tc.tc, tc.max)
		}
		if r.Id != q.Id || r.Question[0] != q.Question[0] {
			t.Errorf("%s EDNS0 %d: answer to another query", tc.network, tc.edns)
		}
	}
}

// TestRelayMalformed: garbage is dropped, a query whose header parses but
// not the rest gets FORMERR, and the relay goes on answering.
func TestRelayMalformed(t *testing.T) {
	tg := startTarget(t)
	_, _, addr := relayingHolder(t, []string{tg.addr}, nil)
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 512)
	// Too short for a header: no answer.
	if _, err := c.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(buf); err == nil {
		t.Errorf("3 bytes answered with %d bytes", n)
	}
	// A header claiming a question that is not there: FORMERR.
	if _, err := c.Write([]byte{0xab, 0xcd, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'e'}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	n, err := c.Read(buf)
	var r dns.Msg
	if err != nil || r.Unpack(buf[:n]) != nil || r.Id != 0xabcd || r.Rcode != dns.RcodeFormatError || !r.Response {
		t.Errorf("broken question: %v %v, want FORMERR to 0xabcd", err, &r)
	}
	if r, _ := ask(t, "udp", addr, new(dns.Msg).SetQuestion("svc.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Errorf("after garbage: %s", dns.RcodeToString[r.Rcode])
	}
}

// rcodes reads the answers to cs until wait has passed and returns the
// time each arrived after start (zero: none) and its rcode.
func rcodes(cs []client, start time.Time, wait time.Duration) ([]time.Duration, []int) {
	took := make([]time.Duration, len(cs))
	codes := make([]int, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			buf := make([]byte, 512)
			_ = c.c.SetReadDeadline(start.Add(wait))
			n, err := c.c.Read(buf)
			var m dns.Msg
			if err == nil && m.Unpack(buf[:n]) == nil && m.Id == c.id {
				took[i], codes[i] = time.Since(start), m.Rcode
			}
		})
	}
	wg.Wait()
	return took, codes
}

// TestRelayInflightBound: past RelayMaxInflight queries, the reader waits
// relaySlotWait for a slot (the queries behind it wait in the socket),
// then those past the bound get SERVFAIL (the relay sheds until a slot
// frees), and those in flight SERVFAIL at the bound: none is left
// unanswered, none waits for the bound past it.
func TestRelayInflightBound(t *testing.T) {
	const inflight, sent, bound = 4, 12, 2 * time.Second
	_, _, addr := relayingHolder(t, []string{silentTarget(t)}, func(c *Config) {
		c.RelayMaxInflight, c.RelayTimeout = inflight, bound
	})
	start := time.Now()
	cs := sendQueries(t, addr, sent)
	took, codes := rcodes(cs, start, bound+time.Second)
	var early, waited, atBound int
	for i := range cs {
		switch {
		case took[i] == 0:
			t.Errorf("query %d: no answer", i)
		case codes[i] != dns.RcodeServerFailure:
			t.Errorf("query %d: %s, want SERVFAIL", i, dns.RcodeToString[codes[i]])
		case took[i] < relaySlotWait*3/4:
			early++
		case took[i] < bound*3/4:
			waited++
		default:
			atBound++
		}
	}
	if early != 0 || waited != sent-inflight || atBound != inflight {
		t.Errorf("SERVFAIL before the wait for a slot: %d, after it: %d, at the bound: %d; want 0, %d (past the bound of %d) and %d",
			early, waited, atBound, sent-inflight, inflight, inflight)
	}
}

// TestRelayBurst: the queue a dead frontend leaves, read at once when
// relaying starts, is relayed as in-flight slots free, none SERVFAIL:
// 25 times the bound, to an address that answers.
func TestRelayBurst(t *testing.T) {
	const inflight, sent = 4, 100
	tg := startTarget(t)
	_, _, addr := relayingHolder(t, []string{tg.addr}, func(c *Config) { c.RelayMaxInflight = inflight })
	start := time.Now()
	cs := sendQueries(t, addr, sent)
	took, codes := rcodes(cs, start, 3*time.Second)
	for i := range cs {
		switch {
		case took[i] == 0:
			t.Errorf("query %d: no answer", i)
		case codes[i] != dns.RcodeSuccess:
			t.Errorf("query %d: %s after %v, want the relay's answer", i, dns.RcodeToString[codes[i]], took[i].Round(time.Millisecond))
		}
	}
	if n := tg.queries.Load(); n != sent {
		t.Errorf("the relay address got %d queries, want %d", n, sent)
	}
}

// TestRelayMemory: with a silent relay address and the in-flight bound
// full, the holder's heap and stacks grow by a few KiB per query (a
// goroutine, a connection, the query's own bytes), not by a 64 KiB buffer
// each.
func TestRelayMemory(t *testing.T) {
	const n = DefaultRelayMaxInflight
	h, _, addr := relayingHolder(t, []string{silentTarget(t)}, func(c *Config) { c.RelayTimeout = 20 * time.Second })
	before := liveBytes()
	cs := sendQueries(t, addr, n)
	deadline := time.Now().Add(5 * time.Second)
	for h.relayInflight() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d queries in flight after 5s, want %d", h.relayInflight(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	grown := int64(liveBytes()) - int64(before)
	per := grown / n
	t.Logf("%d queries in flight to a silent address: heap and stacks +%d KiB, %d bytes per query", n, grown>>10, per)
	if per > 16<<10 {
		t.Errorf("%d bytes per query in flight, want under 16 KiB", per)
	}
	// One more gets SERVFAIL once its wait for a slot ends.
	more := sendQueries(t, addr, 1)
	took, codes := rcodes(more, time.Now(), relaySlotWait+time.Second)
	if took[0] == 0 || codes[0] != dns.RcodeServerFailure {
		t.Errorf("a query past the bound: answered %v, rcode %s; want SERVFAIL after %v", took[0] > 0, dns.RcodeToString[codes[0]], relaySlotWait)
	}
	_ = cs
}

// liveBytes is the heap in use and the goroutine stacks after a GC.
func liveBytes() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func (h *Holder) relayInflight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.relay == nil {
		return 0
	}
	return len(h.relay.slots)
}

// TestRelayHandsBack: queries at a steady rate while the frontend is dead
// and a new one comes back midway are each answered exactly once, by the
// relay before the hello, by the new frontend after: none is lost in the
// handover and none answered twice.
func TestRelayHandsBack(t *testing.T) {
	tg := startTarget(t)
	h, dir, addr := relayingHolder(t, []string{tg.addr}, nil)
	const clients, perClient, every = 4, 100, 4 * time.Millisecond
	type tally struct {
		mu            sync.Mutex
		seen          map[uint16]int
		relay, echoed int
	}
	tallies := make([]*tally, clients)
	var readers, senders sync.WaitGroup
	for i := range tallies {
		tl := &tally{seen: make(map[uint16]int)}
		tallies[i] = tl
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		readers.Go(func() {
			buf := make([]byte, 512)
			for {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				var m dns.Msg
				if m.Unpack(buf[:n]) != nil {
					t.Errorf("an answer that does not parse")
					continue
				}
				tl.mu.Lock()
				tl.seen[m.Id]++
				if len(m.Answer) == 1 {
					tl.relay++
				} else {
					tl.echoed++
				}
				tl.mu.Unlock()
			}
		})
		senders.Go(func() {
			for id := range perClient {
				q := new(dns.Msg).SetQuestion("svc.example.", dns.TypeA)
				q.Id = uint16(id + 1)
				wire, _ := q.Pack()
				if _, err := c.Write(wire); err != nil {
					t.Errorf("send: %v", err)
				}
				time.Sleep(every)
			}
		})
	}
	time.Sleep(perClient * every / 2)
	second := startFrontend(t, dir, []string{"127.0.0.1:0"})
	if h.relaying() {
		t.Error("still relaying after a frontend said hello")
	}
	senders.Wait()
	readers.Wait()
	var relayed, echoed int
	for i, tl := range tallies {
		for id := 1; id <= perClient; id++ {
			if n := tl.seen[uint16(id)]; n != 1 {
				t.Errorf("client %d query %d: answered %d times, want once", i, id, n)
			}
		}
		relayed += tl.relay
		echoed += tl.echoed
	}
	t.Logf("%d queries: %d answered by the relay, %d by the new frontend", clients*perClient, relayed, echoed)
	if relayed == 0 || echoed == 0 {
		t.Errorf("relay answered %d, frontend %d: want both", relayed, echoed)
	}
	waitHeld(t, h, 3)

	// The new frontend dies too: the sockets it supplied are relayed.
	second.die()
	deadline := time.Now().Add(2 * time.Second)
	for !h.relaying() {
		if time.Now().After(deadline) {
			t.Fatal("no relay 2s after the second frontend died")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, network := range []string{"udp", "tcp"} {
		if r, _ := ask(t, network, addr, new(dns.Msg).SetQuestion("again.example.", dns.TypeA)); len(r.Answer) != 1 {
			t.Errorf("%s after the second death: %v, want the relay's answer", network, r)
		}
	}
}

// TestRelayHandsBackTCP: a client's TCP connection served by the relay is
// closed once a frontend says hello (after the answers it had read), not
// left open unread; a new connection reaches the new frontend.
func TestRelayHandsBackTCP(t *testing.T) {
	tg := startTarget(t)
	_, dir, addr := relayingHolder(t, []string{tg.addr}, nil)
	c, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMsg(new(dns.Msg).SetQuestion("svc.example.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if r, err := c.ReadMsg(); err != nil || len(r.Answer) != 1 {
		t.Fatalf("relayed over TCP: %v %v", r, err)
	}
	startFrontend(t, dir, []string{"127.0.0.1:0"})
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.ReadMsg(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the relay's connection after the hello: %v, want it closed", err)
	}
	r, _ := ask(t, "tcp", addr, new(dns.Msg).SetQuestion("svc.example.", dns.TypeA))
	if len(r.Answer) != 0 {
		t.Errorf("a new connection after the hello answered by the relay, want the frontend: %v", r)
	}
}

// TestRelayRedialsRefused: a relay address is a ClusterIP whose endpoints
// kube-proxy picks per connection, and one of them may be a dead backend
// still listed (the API server down): a refused dial is made again, up
// to relayRedials more times, before the query gets SERVFAIL. The dials
// here go to a closed port (a real refusal) for the first refused ones,
// then to a working target.
func TestRelayRedialsRefused(t *testing.T) {
	tg := startTarget(t)
	down := downTarget(t)
	for _, tc := range []struct {
		refused, dials int
		rcode          int
	}{
		{0, 1, dns.RcodeSuccess},
		{3, 4, dns.RcodeSuccess},
		{relayRedials, relayRedials + 1, dns.RcodeSuccess},
		{relayRedials + 1, relayRedials + 1, dns.RcodeServerFailure},
	} {
		t.Run(fmt.Sprintf("%d refused", tc.refused), func(t *testing.T) {
			var dials atomic.Int64
			old := relayDial
			relayDial = func(d *net.Dialer, addr string) (net.Conn, error) {
				if addr != "10.96.0.11:53" {
					return nil, fmt.Errorf("dial of %s, want 10.96.0.11:53", addr)
				}
				if dials.Add(1) <= int64(tc.refused) {
					return d.Dial("tcp", down)
				}
				return d.Dial("tcp", tg.addr)
			}
			t.Cleanup(func() { relayDial = old })
			_, _, addr := relayingHolder(t, []string{"10.96.0.11:53"}, nil)
			r, took := ask(t, "udp", addr, new(dns.Msg).SetQuestion("svc.example.", dns.TypeA))
			if r.Rcode != tc.rcode {
				t.Errorf("rcode %s after %v, want %s", dns.RcodeToString[r.Rcode], took, dns.RcodeToString[tc.rcode])
			}
			if n := dials.Load(); n != int64(tc.dials) {
				t.Errorf("%d dials, want %d", n, tc.dials)
			}
		})
	}
}
