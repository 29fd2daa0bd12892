package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// slowUpstream is a fake backend in front of slow external servers: names
// whose first label starts with "slow" are answered SERVFAIL after delay,
// as CoreDNS's forward answers a name whose servers never reply; the probe
// question and every other name are answered at once.
type slowUpstream struct {
	delay   time.Duration
	done    chan struct{} // closed at the end of the test: slow handlers return
	queries atomic.Int64  // ordinary names asked
	slow    atomic.Int64  // slow names asked
}

func (b *slowUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	switch {
	case strings.HasPrefix(q.Name, "slow"):
		b.slow.Add(1)
		select {
		case <-time.After(b.delay):
		case <-b.done:
		}
		m.Rcode = dns.RcodeServerFailure
	case q.Qtype == dns.TypeA:
		b.queries.Add(1)
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   net.IPv4(192, 0, 2, 1),
		})
	}
	_ = w.WriteMsg(m)
}

func startSlowUpstream(t *testing.T, delay time.Duration) (*slowUpstream, string) {
	b := &slowUpstream{delay: delay, done: make(chan struct{})}
	s := dnstest.Start(t, b)
	t.Cleanup(func() { close(b.done) }) // runs before the server's Close
	return b, s.Addr
}

// TestSlowNamesAndAHogSpareTheOthers is the hostile neighbour of a real
// node, through the whole frontend: one pod (127.0.0.2) sends 1,000
// queries a second, for 5 s, of names whose upstream servers never answer
// (the backend gives up after 6 s and answers SERVFAIL), while 40 other
// pods (127.0.0.3 to 127.0.0.42) resolve ordinary names, each one a miss.
// A fallback is configured, as the chart does.
//
// At least 99% of the others' misses must be answered NOERROR, none by the
// fallback, and neither upstream may be marked down: a slow name is not a
// dead backend, and one pod's misses in flight are bounded by its share.
// Before per-source shares and out-of-band health, the slow names took
// every in-flight slot within two seconds and their timeouts marked the
// backend and then the fallback down, so the others got SERVFAIL.
func TestSlowNamesAndAHogSpareTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 7 s load test")
	}
	be, beAddr := startSlowUpstream(t, 6*time.Second)
	fb, fbAddr := startSlowUpstream(t, 6*time.Second)
	l := startRun(t, append(baseArgs(t, beAddr), "--fallback="+fbAddr)...)
	addr := l.DNS[0]

	const (
		burst    = 5 * time.Second
		after    = 2 * time.Second // ordinary misses go on after the burst
		clients  = 40
		interval = 50 * time.Millisecond // 20 misses a second per client
		hogRate  = 1000
	)
	ctx, cancel := context.WithTimeout(context.Background(), burst)
	defer cancel()
	var wg sync.WaitGroup

	hog := dialUDPFrom(t, "127.0.0.2", addr)
	var hogSent int
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / hogRate)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			b, _ := dnstest.Query(fmt.Sprintf("slow%d.unreachable.example", hogSent), dns.TypeA).Pack()
			_, _ = hog.Write(b) // answers are not read: a pod that does not care
			hogSent++
		}
	}()

	type tally struct{ ok, servfail, timeout int }
	results := make([]tally, clients)
	stop := time.Now().Add(burst + after)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialUDPFrom(t, fmt.Sprintf("127.0.0.%d", 3+i), addr)
			buf := make([]byte, 1232)
			for n := 0; time.Now().Before(stop); n++ {
				q := dnstest.Query(fmt.Sprintf("svc%d-%d.example", n, i), dns.TypeA)
				b, _ := q.Pack()
				_, _ = c.Write(b)
				_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
				r := new(dns.Msg)
				for {
					k, err := c.Read(buf)
					if err != nil {
						results[i].timeout++
						break
					}
					if r.Unpack(buf[:k]) == nil && r.Id == q.Id {
						if r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 {
							results[i].ok++
						} else {
							results[i].servfail++
						}
						break
					}
				}
				time.Sleep(interval)
			}
		}()
	}
	wg.Wait()

	var sum tally
	for _, r := range results {
		sum.ok += r.ok
		sum.servfail += r.servfail
		sum.timeout += r.timeout
	}
	total := sum.ok + sum.servfail + sum.timeout
	body := httpGet(t, "http://"+l.Metrics+"/metrics", 200)
	healthy := func(kind string) string {
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "nodedns_upstream_healthy{") && strings.Contains(line, `upstream="`+kind+`"`) {
				return line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
		return "missing"
	}
	t.Logf("FIGURE slow names: hog sent %d slow names in %v (backend saw %d, fallback %d); 40 clients: %d misses, %d NOERROR, %d SERVFAIL, %d timed out; fallback answered %d ordinary names; healthy backend=%s fallback=%s",
		hogSent, burst, be.slow.Load(), fb.slow.Load(), total, sum.ok, sum.servfail, sum.timeout, fb.queries.Load(), healthy("backend"), healthy("fallback"))
	if total < clients*20 {
		t.Fatalf("only %d ordinary misses were sent: the clients were starved, not the frontend", total)
	}
	if sum.ok*100 < total*99 {
		t.Errorf("%d of %d ordinary misses answered NOERROR, want at least 99%%", sum.ok, total)
	}
	if n := fb.queries.Load(); n != 0 {
		t.Errorf("the fallback answered %d ordinary names: the backend was treated as failed", n)
	}
	if h := healthy("backend"); h != "1" {
		t.Errorf("backend healthy = %s after the burst, want 1", h)
	}
	if h := healthy("fallback"); h != "1" {
		t.Errorf("fallback healthy = %s after the burst, want 1", h)
	}

	// The first ordinary miss after the burst is answered at once.
	start := time.Now()
	r := dnstest.Exchange(t, "udp", addr, dnstest.Query("after.example", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || time.Since(start) > time.Second {
		t.Errorf("first miss after the burst: %s in %v, want NOERROR at once", dns.RcodeToString[r.Rcode], time.Since(start))
	}
}

// dialUDPFrom connects a UDP socket from the loopback address src: each
// such address is a client (a pod) of its own to the frontend.
func dialUDPFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
