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
)

// A slow name is not a dead backend: names whose upstream is slow must not
// mark the backend (or a fallback) down, nor push other names' misses to
// the fallback. These tests use only Exchange and Status, so that they
// describe the behaviour, not the mechanism.

// slowBackend answers every query at once with ip, except names under
// slow.example., which it answers only after delay: a backend forwarding
// them to a resolver that is slow to answer.
type slowBackend struct {
	ip      net.IP
	delay   time.Duration
	release chan struct{} // closed at the end of the test: slow answers stop waiting
	slow    atomic.Int64  // slow queries received
}

func (b *slowBackend) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if dns.IsSubDomain("slow.example.", r.Question[0].Name) {
		b.slow.Add(1)
		select {
		case <-time.After(b.delay):
		case <-b.release:
			return
		}
	}
	m := new(dns.Msg)
	m.SetReply(r)
	if r.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
			A:   b.ip,
		})
	}
	_ = w.WriteMsg(m)
}

// startSlow serves a slowBackend; its slow answers are released before the
// server stops, so that the server's shutdown does not wait for them.
func startSlow(t *testing.T, ip net.IP, delay time.Duration) (*dnstest.Server, *slowBackend) {
	t.Helper()
	b := &slowBackend{ip: ip, delay: delay, release: make(chan struct{})}
	s := dnstest.Start(t, dns.HandlerFunc(b.ServeDNS))
	t.Cleanup(func() { close(b.release) }) // runs before the server's Cleanup
	return s, b
}

// healthy reports the health of every address in p's Status, backend first.
func healthy(p *Pool) []bool {
	var h []bool
	for _, a := range p.Status().Addresses {
		h = append(h, a.Healthy)
	}
	return h
}

func allHealthy(p *Pool) bool {
	for _, ok := range healthy(p) {
		if !ok {
			return false
		}
	}
	return true
}

// TestSlowNamesDoNotMarkDown: one caller's burst of slow names, each
// taking longer than the attempt timeout on the backend and on the
// fallback, marks neither down; 40 other callers' misses meanwhile are all
// answered by the backend; and the first miss after the burst is answered
// at once.
func TestSlowNamesDoNotMarkDown(t *testing.T) {
	const timeout = 300 * time.Millisecond
	be, slowBe := startSlow(t, net.IPv4(10, 0, 0, 1), 10*timeout)
	fb, _ := startSlow(t, net.IPv4(10, 0, 0, 2), 10*timeout)
	p, _ := newPool(t, Config{Backend: be.Addr, Fallbacks: []string{fb.Addr}, Timeout: timeout})

	ctx, stop := context.WithTimeout(context.Background(), 4*timeout)
	defer stop()
	var wg sync.WaitGroup
	var slowSent atomic.Int64
	for w := range 8 { // the slow caller: 8 slow names in flight at any time
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				slowSent.Add(1)
				_, _ = p.Exchange(context.Background(), dnstest.Query(fmt.Sprintf("n%d-%d.slow.example.", w, i), dns.TypeA))
			}
		})
	}
	var ordinary, failed, byFallback atomic.Int64
	var downSeen atomic.Bool
	for c := range 40 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				ordinary.Add(1)
				r, err := p.Exchange(context.Background(), dnstest.Query(fmt.Sprintf("c%d-%d.example.", c, i), dns.TypeA))
				switch {
				case err != nil:
					failed.Add(1)
				case answeredBy(r) != "10.0.0.1":
					byFallback.Add(1)
				}
				if !allHealthy(p) {
					downSeen.Store(true)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if slowBe.slow.Load() < 16 {
		t.Fatalf("the backend saw %d slow queries; the burst did not happen", slowBe.slow.Load())
	}
	if failed.Load() != 0 || byFallback.Load() != 0 {
		t.Errorf("of %d ordinary misses during the burst, %d failed and %d went to the fallback; want all from the backend",
			ordinary.Load(), failed.Load(), byFallback.Load())
	}
	if downSeen.Load() || !allHealthy(p) {
		t.Errorf("an address was marked down during a burst of %d slow names (now %v)", slowSent.Load(), healthy(p))
	}
	start := time.Now()
	r, err := p.Exchange(context.Background(), dnstest.Query("after.example.", dns.TypeA))
	if d := time.Since(start); err != nil || answeredBy(r) != "10.0.0.1" || d >= timeout {
		t.Errorf("first miss after the burst: %v, %v after %v; want the backend's answer at once", r, err, d)
	}
}

// TestSlowNameAAndAAAA: on a quiet node, one name whose A and AAAA both
// time out (on the backend, then on the fallback) marks nothing down.
func TestSlowNameAAndAAAA(t *testing.T) {
	const timeout = 200 * time.Millisecond
	be, _ := startSlow(t, net.IPv4(10, 0, 0, 1), 10*timeout)
	fb, _ := startSlow(t, net.IPv4(10, 0, 0, 2), 10*timeout)
	p, _ := newPool(t, Config{Backend: be.Addr, Fallbacks: []string{fb.Addr}, Timeout: timeout})

	var wg sync.WaitGroup
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Go(func() {
			if _, err := p.Exchange(context.Background(), dnstest.Query("www.slow.example.", qt)); Reason(err) != ReasonTimeout {
				t.Errorf("%s: err %v, want a timeout", dns.TypeToString[qt], err)
			}
		})
	}
	wg.Wait()
	if !allHealthy(p) {
		t.Errorf("health after one slow name's A and AAAA: %v, want all healthy", healthy(p))
	}
	start := time.Now()
	r, err := p.Exchange(context.Background(), dnstest.Query("next.example.", dns.TypeA))
	if d := time.Since(start); err != nil || answeredBy(r) != "10.0.0.1" || d >= timeout {
		t.Errorf("next miss: %v, %v after %v; want the backend's answer at once", r, err, d)
	}
}

// TestSlowNameBurstFigure measures the case of docs/reliability.md,
// "Upstream health: a slow name is not a dead backend", with the pool's
// default timeouts: 40 callers each sending an ordinary miss a second while one caller
// sends slow names for 5s, against a pool with a fallback; the slow names
// take longer than any attempt timeout. It logs how many ordinary misses
// failed or went to the fallback, and how long after the burst the first
// ordinary miss was answered by the backend.
//
//	go test ./frontend/upstream -run TestSlowNameBurstFigure -v
func TestSlowNameBurstFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the burst lasts 5s")
	}
	const burst = 5 * time.Second
	be, _ := startSlow(t, net.IPv4(10, 0, 0, 1), time.Minute)
	fb, _ := startSlow(t, net.IPv4(10, 0, 0, 2), time.Minute)
	p, _ := newPool(t, Config{Backend: be.Addr, Fallbacks: []string{fb.Addr}})

	ctx, stop := context.WithTimeout(context.Background(), burst)
	defer stop()
	var wg sync.WaitGroup
	var slowSent atomic.Int64
	wg.Go(func() { // the slow caller: a new slow name every 20ms
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			slowSent.Add(1)
			go func() {
				_, _ = p.Exchange(context.Background(), dnstest.Query(fmt.Sprintf("n%d.slow.example.", i), dns.TypeA))
			}()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	})
	var ordinary, failed, byFallback atomic.Int64
	var clientsHit [40]atomic.Bool
	for c := range clientsHit {
		wg.Go(func() {
			// Each pod resolves a new name about once a second, spread out.
			time.Sleep(time.Duration(c) * time.Second / 40)
			for i := 0; ctx.Err() == nil; i++ {
				ordinary.Add(1)
				qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a pod's resolver gives up
				r, err := p.Exchange(qctx, dnstest.Query(fmt.Sprintf("c%d-%d.example.", c, i), dns.TypeA))
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
					clientsHit[c].Store(true)
				case answeredBy(r) != "10.0.0.1":
					byFallback.Add(1)
				}
				time.Sleep(time.Second)
			}
		})
	}
	wg.Wait()
	var hit int
	for i := range clientsHit {
		if clientsHit[i].Load() {
			hit++
		}
	}
	// After the burst: how long until an ordinary miss is the backend's.
	start := time.Now()
	var recovered time.Duration = -1
	for time.Since(start) < 40*time.Second {
		r, err := p.Exchange(context.Background(), dnstest.Query(fmt.Sprintf("after-%d.example.", time.Now().UnixNano()), dns.TypeA))
		if err == nil && answeredBy(r) == "10.0.0.1" {
			recovered = time.Since(start)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d slow names in %v; %d ordinary misses: %d failed (%d of 40 clients saw a failure), %d answered by the fallback; "+
		"first backend answer %v after the burst; health at the end %v",
		slowSent.Load(), burst, ordinary.Load(), failed.Load(), hit, byFallback.Load(), recovered.Round(time.Millisecond), healthy(p))
	if failed.Load() != 0 || byFallback.Load() != 0 || recovered < 0 || recovered > time.Second {
		t.Errorf("ordinary misses disturbed by slow names: %d failed, %d by the fallback, recovered after %v",
			failed.Load(), byFallback.Load(), recovered)
	}
}
