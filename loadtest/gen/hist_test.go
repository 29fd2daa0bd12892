package gen

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	// Every bucket's bounds map back to it, and buckets tile the range.
	prevHi := time.Duration(-1)
	for i := range nBuckets {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d] maps to %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= subBuckets {
			if w := float64(hi-lo+1) / float64(lo); w > 1.0/subBuckets {
				t.Fatalf("bucket %d is %.3f of its values wide", i, w)
			}
		}
		prevHi = hi
		if hi < 0 { // past int64: the last buckets
			break
		}
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7 * time.Millisecond}, 0.99, 7 * time.Millisecond},
		{"small exact", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5, 5},
		{"small p90", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{"max", []time.Duration{1, 2, 3, time.Second}, 1, time.Second},
		{"q0 is min", []time.Duration{time.Millisecond, time.Second}, 0, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tc.values {
				h.Record(v)
			}
			if got := h.Quantile(tc.q); got != tc.want {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// TestQuantileError compares against exact order statistics of random
// latencies: never below, at most one bucket (1/64) above.
func TestQuantileError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h, a, b Histogram
	vals := make([]time.Duration, 100000)
	for i := range vals {
		// Log-uniform from 10µs to 10s, like DNS latencies with timeouts.
		v := time.Duration(10e3 * math.Pow(10, r.Float64()*6))
		vals[i] = v
		h.Record(v)
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(q*float64(len(vals))+0.999999)-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subBuckets {
			t.Errorf("q%v = %v, exact %v", q, got, exact)
		}
		if m := a.Quantile(q); m != got {
			t.Errorf("merged q%v = %v, single %v", q, m, got)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] || h.Count() != uint64(len(vals)) {
		t.Errorf("max/min/count %v %v %d", h.Max(), h.Min(), h.Count())
	}
}

func TestHistogramJSONRoundTrip(t *testing.T) {
	var h Histogram
	for i := range 1000 {
		h.Record(time.Duration(i) * 37 * time.Microsecond)
	}
	r := &Result{Latency: &h}
	r.fill()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	m := Merge(&back, &back)
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if got, want := m.Hist().Quantile(q), h.Quantile(q); got != want {
			t.Errorf("q%v after JSON and merge: %v, want %v", q, got, want)
		}
	}
	if m.Hist().Count() != 2000 || m.Percentiles.Mean != h.Mean() {
		t.Errorf("count %d mean %v, want 2000 and %v", m.Hist().Count(), m.Percentiles.Mean, h.Mean())
	}
}
