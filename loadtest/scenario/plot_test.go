package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// TestCCDFPoints: the tail plot shows the fraction slower than each
// latency, and leaves out the point with none slower (log axis).
func TestCCDFPoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		cdf  [][2]float64
		want [][2]float64 // (ms, fraction slower)
	}{
		{"tail", [][2]float64{{1e6, 0.9}, {2e6, 0.99}, {10e6, 0.999}, {40e6, 1}}, [][2]float64{{1, 0.1}, {2, 0.01}, {10, 0.001}}},
		{"zero latency dropped", [][2]float64{{0, 0.5}, {3e6, 1}}, nil},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := ccdfPoints(tc.cdf)
			if len(pts) != len(tc.want) {
				t.Fatalf("ccdfPoints(%v) = %v, want %v", tc.cdf, pts, tc.want)
			}
			for i, w := range tc.want {
				if d := pts[i].Y - w[1]; pts[i].X != w[0] || d > 1e-9 || d < -1e-9 {
					t.Errorf("point %d = (%v, %v), want (%v, %v)", i, pts[i].X, pts[i].Y, w[0], w[1])
				}
			}
		})
	}
}

// TestWritePlotsTail: a report with measured designs gets the CCDF beside
// the CDF.
func TestWritePlotsTail(t *testing.T) {
	rep := &Report{}
	for i, design := range []string{"nodedns", "coredns"} {
		h := new(gen.Histogram)
		for j := range 10000 {
			h.Record(time.Duration(100+j*(i+1)) * time.Microsecond / 10)
		}
		h.Record(40 * time.Millisecond)
		rep.Rows = append(rep.Rows, Row{Design: design, Load: &gen.Result{Latency: h}})
	}
	dir := t.TempDir()
	files, err := rep.WritePlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"latency-cdf.png", "latency-ccdf.png"} {
		if !slices.Contains(files, want) {
			t.Errorf("WritePlots wrote %v, want %s among them", files, want)
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, want)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %v)", want, err, st)
		}
	}
}
