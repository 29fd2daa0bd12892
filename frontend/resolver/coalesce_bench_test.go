package resolver

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/dnstest"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
)

// BenchmarkCoalescedMisses sends n identical misses at once (n pods asking
// one new name) through the resolver and the real upstream pool to an
// in-process backend that answers after 5ms, long enough for all n to
// join one exchange. It reports the CPU time (user and system, the
// backend's included) and allocations per waiter: with one exchange and
// one cache entry for all n, both fall as n grows.
func BenchmarkCoalescedMisses(b *testing.B) {
	backend := dnstest.Start(b, dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		time.Sleep(5 * time.Millisecond)
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for i := range 4 { // a headless Service with four endpoints
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
				A:   []byte{10, 244, byte(i), 7},
			})
		}
		if o := q.IsEdns0(); o != nil {
			m.SetEdns0(1232, o.Do())
		}
		_ = w.WriteMsg(m)
	}))
	for _, n := range []int{1, 10, 100, 200} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			pool, err := upstream.New(upstream.Config{Backend: backend.Addr}, zap.NewNop(), sharedmetrics.NewSet())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = pool.Close() })
			r, err := New(DefaultConfig(), pool, sharedmetrics.NewSet(), nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(r.Close)
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = buf()
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cpuTime(b)
			i := 0
			for b.Loop() {
				i++
				req := pack(b, fmt.Sprintf("svc-%d.ns.svc.cluster.local.", i), dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
				var wg sync.WaitGroup
				for w := range n {
					wg.Go(func() {
						if out := r.ServeSlow(context.Background(), bufs[w], req, server.UDP); len(out) < 12 || out[3]&0xf != 0 {
							b.Error("no answer")
						}
					})
				}
				wg.Wait()
			}
			cpu := cpuTime(b) - cpu0
			runtime.ReadMemStats(&ms1)
			waiters := float64(i * n)
			b.ReportMetric(float64(cpu.Nanoseconds())/waiters, "cpu-ns/waiter")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/waiters, "allocs/waiter")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/waiters, "B/waiter")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
