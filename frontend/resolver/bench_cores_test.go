package resolver

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

// BenchmarkHitCores runs cache hits over 4,096 names on GOMAXPROCS
// goroutines at once, as the per-CPU socket readers do, and reports the
// process's CPU time per hit (cpu-ns/hit) beside the wall time per hit
// (ns/op). With nothing shared written on the hit path, cpu-ns/hit stays
// flat as cores are added, up to the machine's core count; beyond it
// goroutines only take turns.
//
//	go test ./frontend/resolver -run '^$' -bench HitCores -cpu=1,2,4,8,16
func BenchmarkHitCores(b *testing.B) {
	ex := &fakeExchanger{}
	ex.set(records(b, dns.RcodeSuccess, "x. 30 IN A 10.96.0.10"))
	r, _ := newResolver(b, DefaultConfig(), ex, nil)
	const names = 4096
	reqs := make([][]byte, names)
	for i := range reqs {
		reqs[i] = pack(b, fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%64), dns.TypeA,
			func(m *dns.Msg) { m.SetEdns0(1232, false) })
		serve(b, r, reqs[i], server.UDP)
	}
	var worker atomic.Uint32
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		dst := buf()
		i := int(worker.Add(1)) * 997
		for pb.Next() {
			if _, ok := r.ServeFast(dst, reqs[i%names], server.UDP); !ok {
				b.Error("miss on a cached name")
				return
			}
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/hit")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
