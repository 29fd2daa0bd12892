package resolver

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

// TestHitMetricsTakeNoLock runs cache hits on every P at once with the
// mutex profiler recording every contended lock, and fails if any of the
// contention was in the code that counts and times a hit: the hit path's
// series are kept per P, so readers on different cores never wait for
// one another there.
func TestHitMetricsTakeNoLock(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		t.Skipf("GOMAXPROCS=%d: contention between cores needs at least 2", procs)
	}
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 30 IN A 10.96.0.10"))
	r, _ := newResolver(t, DefaultConfig(), ex, nil)
	// One name per goroutine, so that most of them sit in different cache
	// shards; only the metrics' frames are looked at below anyway.
	workers := 2 * procs
	reqs := make([][]byte, workers)
	for i := range reqs {
		reqs[i] = pack(t, fmt.Sprintf("svc%d.default.svc.cluster.local.", i), dns.TypeA, nil)
		serve(t, r, reqs[i], server.UDP)
	}

	prev := runtime.SetMutexProfileFraction(1)
	defer runtime.SetMutexProfileFraction(prev)
	var wg sync.WaitGroup
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := range workers {
		wg.Go(func() {
			dst := buf()
			for time.Now().Before(deadline) {
				for range 1000 {
					if _, ok := r.ServeFast(dst, reqs[i], server.UDP); !ok {
						t.Error("miss on a cached name")
						return
					}
				}
			}
		})
	}
	wg.Wait()
	runtime.SetMutexProfileFraction(0)

	var b bytes.Buffer
	if err := pprof.Lookup("mutex").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(rec, "resolver.(*metrics)") || strings.Contains(rec, "VictoriaMetrics/metrics.(*PrometheusHistogram)") {
			t.Fatalf("hits waited for a lock in the metrics:\n%s", rec)
		}
	}
}
