package metrics

import (
	"bytes"
	"math"
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
)

// TestRuntimeHistogram checks the regrouping of a runtime histogram's
// buckets under fewer bounds: each bound counts the runtime buckets that
// end at or below it.
func TestRuntimeHistogram(t *testing.T) {
	h := &rtmetrics.Float64Histogram{
		// [-Inf,0.001) [0.001,0.002) [0.002,0.004) [0.004,+Inf)
		Buckets: []float64{math.Inf(-1), 0.001, 0.002, 0.004, math.Inf(1)},
		Counts:  []uint64{1, 2, 4, 8},
	}
	for _, tc := range []struct {
		name   string
		bounds []float64
		want   map[string]float64
	}{
		{"aligned", []float64{0.001, 0.002}, map[string]float64{`h_bucket{le="0.001"}`: 1, `h_bucket{le="0.002"}`: 3, `h_bucket{le="+Inf"}`: 15}},
		// 0.003 falls inside [0.002,0.004): that bucket is not counted yet.
		{"between", []float64{0.003, 0.004}, map[string]float64{`h_bucket{le="0.003"}`: 3, `h_bucket{le="0.004"}`: 7, `h_bucket{le="+Inf"}`: 15}},
		{"below all", []float64{0.0001}, map[string]float64{`h_bucket{le="0.0001"}`: 0, `h_bucket{le="+Inf"}`: 15}},
		{"above all finite", []float64{10}, map[string]float64{`h_bucket{le="10"}`: 7, `h_bucket{le="+Inf"}`: 15}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			writeRuntimeHistogram(&buf, "h", "A test histogram.", h, tc.bounds)
			got, err := parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d series, want %d:\n%s", len(got), len(tc.want), buf.String())
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || g != w {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
				}
			}
		})
	}
}

// TestGCDuration checks the summary of the last pauses: quantiles over the
// pauses recorded so far only (not the empty slots of the runtime's
// 256-entry ring), and the ring read from its most recent entry back.
func TestGCDuration(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   runtime.MemStats
		want map[string]float64
	}{
		{"none", runtime.MemStats{}, map[string]float64{`s{quantile="0"}`: 0, `s{quantile="1"}`: 0, "s_count": 0, "s_sum": 0}},
		{"three", func() runtime.MemStats {
			var ms runtime.MemStats
			ms.NumGC, ms.PauseTotalNs = 3, 6e6
			ms.PauseNs[0], ms.PauseNs[1], ms.PauseNs[2] = 3e6, 1e6, 2e6
			return ms
		}(), map[string]float64{`s{quantile="0"}`: 0.001, `s{quantile="0.5"}`: 0.002, `s{quantile="1"}`: 0.003, "s_count": 3, "s_sum": 0.006}},
		{"ring wrapped", func() runtime.MemStats {
			var ms runtime.MemStats
			ms.NumGC = 300
			for i := range ms.PauseNs {
				ms.PauseNs[i] = 1e6
			}
			ms.PauseNs[(300-1)%256] = 9e6 // the latest
			return ms
		}(), map[string]float64{`s{quantile="0"}`: 0.001, `s{quantile="0.75"}`: 0.001, `s{quantile="1"}`: 0.009, "s_count": 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			writeGCDuration(&buf, "s", &tc.ms)
			got, err := parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-12 {
					t.Errorf("%s = %v (present %v), want %v\n%s", k, g, ok, w, buf.String())
				}
			}
		})
	}
}
