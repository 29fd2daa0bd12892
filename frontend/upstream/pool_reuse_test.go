package upstream

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// TestPoolKeepsConnectionsOfConcurrentMisses sends rounds of concurrent
// misses, each round with new names, to a backend that takes a moment to
// answer: every round needs as many connections as it has misses. With the
// default pool the first round dials them and the later rounds reuse them;
// the control pool, with the old bound of 32 idle connections, closes the
// rest on their return and dials them again in every round, a new
// connection (a TIME_WAIT socket, a conntrack entry) per third miss.
func TestPoolKeepsConnectionsOfConcurrentMisses(t *testing.T) {
	const concurrency, rounds = 50, 5
	bound := int64(concurrency + concurrency/10)
	for _, tc := range []struct {
		name    string
		maxIdle int
		reused  bool // dials stay within bound
	}{
		{"default pool", 0, true},
		{"control: 32 idle connections", 32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var accepted atomic.Int64
			addr, _ := serveTCP(t, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
				time.Sleep(20 * time.Millisecond) // long enough for every miss of a round to be in flight
				m := new(dns.Msg).SetReply(r)
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
					A:   net.IPv4(10, 0, 0, 1),
				})
				_ = w.WriteMsg(m)
			}), &accepted)
			p, set := newPool(t, Config{Backend: addr, MaxIdleConns: tc.maxIdle})
			for round := range rounds {
				var wg sync.WaitGroup
				errs := make(chan error, concurrency)
				for i := range concurrency {
					wg.Add(1)
					go func() {
						defer wg.Done()
						name := fmt.Sprintf("r%d-q%d.example.", round, i)
						r, err := p.Exchange(context.Background(), dnstest.Query(name, dns.TypeA))
						if err == nil && answeredBy(r) != "10.0.0.1" {
							err = fmt.Errorf("answer %v", r)
						}
						if err != nil {
							errs <- fmt.Errorf("round %d, %s: %w", round, name, err)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
			dials := accepted.Load()
			t.Logf("%d dials for %d rounds of %d concurrent misses; %v connections open after them",
				dials, rounds, concurrency, metricstest.Value(t, set, "nodedns_upstream_conns_open"))
			if got := dials <= bound; got != tc.reused {
				t.Errorf("%d dials for %d rounds of %d concurrent misses; within %d: %v, want %v",
					dials, rounds, concurrency, bound, got, tc.reused)
			}
			if open := metricstest.Value(t, set, "nodedns_upstream_conns_open"); open > float64(concurrency) {
				t.Errorf("%v connections open, more than the %d misses that were ever in flight at once", open, concurrency)
			}
		})
	}
}

// TestPoolDatesConnectionsByTheirReturn checks the idle list's order: a
// connection is dated when its exchange ends, so one that served a slow
// query and came back last is the newest, and idle expiry (which closes the
// oldest first and stops at the first one still fresh) closes what has been
// idle longest.
func TestPoolDatesConnectionsByTheirReturn(t *testing.T) {
	release := make(chan struct{})
	var accepted atomic.Int64
	addr, _ := serveTCP(t, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		if r.Question[0].Name == "slow.example." {
			<-release
		}
		_ = w.WriteMsg(new(dns.Msg).SetReply(r))
	}), &accepted)
	p, _ := newPool(t, Config{Backend: addr})
	a := p.addrs[0]
	slow := make(chan error, 1)
	go func() {
		_, err := p.Exchange(context.Background(), dnstest.Query("slow.example.", dns.TypeA))
		slow <- err
	}()
	for accepted.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	exchange(t, p, "fast.example.") // a second connection, back first
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.idle) != 2 {
		t.Fatalf("%d idle connections, want 2", len(a.idle))
	}
	if !a.idle[0].used.Before(a.idle[1].used) {
		t.Errorf("idle list out of order: the slow query's connection, returned last, is dated %v, before the other's %v",
			a.idle[1].used, a.idle[0].used)
	}
}
