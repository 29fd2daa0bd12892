package metrics

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"unsafe"
)

// TestShardedExpositionMatches checks that sharded series write exactly
// what the VictoriaMetrics series they replace write for the same
// observations: names, label order, le values, _sum formatting, metadata.
func TestShardedExpositionMatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bounds []float64
		obs    []float64
	}{
		{"integers", []float64{1, 2, 4, 8, 16, 32, 64, 128}, []float64{1, 1, 3, 64, 200, 0}},
		{"seconds", []float64{0.00025, 0.0005, 0.001, 0.002}, []float64{0.0001, 0.0007, 0.5}},
		{"none", []float64{0.5, 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, sharded := NewSet(), NewSet()
			// Families in sorted order: the old set sorts, writers keep order.
			cnames := []string{
				Name("nodedns_test_a_total", "proto", "udp", "direction", "in"),
				Name("nodedns_test_a_total", "proto", "udp", "direction", "out"),
			}
			hname := Name("nodedns_test_b_seconds", "server", "dns://:53", "zone", ".")
			oc0, oc1 := old.NewCounter(cnames[0]), old.NewCounter(cnames[1])
			oh := old.NewPrometheusHistogramExt(hname, tc.bounds)
			cs := NewShardedCounters(sharded, cnames...)
			sh := NewShardedHistogram(sharded, hname, tc.bounds)
			for i, v := range tc.obs {
				oh.Update(v)
				sh.Update(v)
				oc0.Add(i)
				cs[0].Add(i)
			}
			oc1.Inc()
			cs[1].Inc()
			var a, b bytes.Buffer
			old.WritePrometheus(&a)
			sharded.WritePrometheus(&b)
			if a.String() != b.String() {
				t.Errorf("sharded exposition differs\n--- VictoriaMetrics:\n%s--- sharded:\n%s", a.String(), b.String())
			}
		})
	}
}

// TestShardedConcurrent checks that updates from every P add up exactly.
func TestShardedConcurrent(t *testing.T) {
	set := NewSet()
	c := NewShardedCounters(set, "nodedns_test_total")[0]
	h := NewShardedHistogram(set, "nodedns_test_size", []float64{1, 10})
	const workers, each = 8, 10000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range each {
				c.Inc()
				h.UpdateN(float64(i%20), 2)
			}
		})
	}
	wg.Wait()
	v := Values(set)
	if got := c.Get(); got != workers*each {
		t.Errorf("counter = %d, want %d", got, workers*each)
	}
	if got, want := v[`nodedns_test_size_count`], float64(2*workers*each); got != want {
		t.Errorf("histogram count = %v, want %v", got, want)
	}
	// Per worker, i%20 in 0..1 twice per 20: 2 obs of weight 2.
	if got, want := v[`nodedns_test_size_bucket{le="1"}`], float64(workers*each/20*2*2); got != want {
		t.Errorf("bucket le=1 = %v, want %v", got, want)
	}
	// Sum: per 20 values 0..19 = 190, weight 2.
	if got, want := v[`nodedns_test_size_sum`], float64(workers*each/20*190*2); got != want {
		t.Errorf("sum = %v, want %v", got, want)
	}
}

// TestShardsOnOwnLines checks the layout that keeps cores apart: as many
// shards as Ps, each starting on a cache line of its own.
func TestShardsOnOwnLines(t *testing.T) {
	b := newBlock(3)
	if n := b.mask + 1; n < runtime.GOMAXPROCS(0) || n&(n-1) != 0 {
		t.Fatalf("%d shards for GOMAXPROCS %d: want a power of two at least as large", n, runtime.GOMAXPROCS(0))
	}
	for s := 1; s <= b.mask; s++ {
		gap := uintptr(unsafe.Pointer(&b.words[b.local(s)])) - uintptr(unsafe.Pointer(&b.words[b.local(s-1)]))
		if gap < cacheLine || gap%cacheLine != 0 {
			t.Errorf("shard %d starts %d bytes after shard %d: want a multiple of %d", s, gap, s-1, cacheLine)
		}
	}
	if got := b.local(b.mask + 1); got != 0 {
		t.Errorf("P beyond the shard count maps to shard offset %d, want 0 (wrap)", got)
	}
}

func TestShardedHistogramIgnoresNegative(t *testing.T) {
	set := NewSet()
	h := NewShardedHistogram(set, "nodedns_test_seconds", []float64{1})
	h.Update(-1)
	h.UpdateN(0.5, 0)
	if got := Values(set)["nodedns_test_seconds_count"]; got != 0 {
		t.Errorf("count = %v after a negative value and a zero weight, want 0", got)
	}
}

// BenchmarkShardedCounter and BenchmarkVMCounter compare one increment on
// every core.
func BenchmarkShardedCounter(b *testing.B) {
	c := NewShardedCounters(NewSet(), "nodedns_bench_total")[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkShardedHistogram(b *testing.B) {
	h := NewShardedHistogram(NewSet(), "nodedns_bench_seconds", []float64{0.001, 0.01, 0.1})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Update(0.005)
		}
	})
}

func BenchmarkVMHistogram(b *testing.B) {
	h := NewSet().NewPrometheusHistogramExt("nodedns_bench_seconds", []float64{0.001, 0.01, 0.1})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Update(0.005)
		}
	})
}
