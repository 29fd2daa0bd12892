package scenario

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// designColors keeps a design's colour the same in every plot.
var designColors = map[string]color.Color{
	"coredns":   color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"nodelocal": color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"zalando":   color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"nodedns":   color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	// The CoreDNS DaemonSets: purple and brown.
	"coredns-ds-local":  color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"coredns-ds-prefer": color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// WritePlots writes latency-cdf.png, latency-ccdf.png (the same
// latencies as the fraction of lookups slower than x, log-log, where the
// tail is visible) and, with chaos rows, one chaos-<experiment>.png each;
// it returns the file names.
func (r *Report) WritePlots(dir string) (files []string, err error) {
	defer func() {
		// gonum/plot panics on degenerate data (an empty log axis).
		if v := recover(); v != nil {
			err = fmt.Errorf("plot: %v", v)
		}
	}()
	for _, ccdf := range []bool{false, true} {
		p, lines, err := r.latencyPlot(ccdf)
		if err != nil {
			return files, err
		}
		if lines == 0 { // no design was measured
			continue
		}
		name := "latency-cdf.png"
		if ccdf {
			name = "latency-ccdf.png"
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return files, err
		}
		files = append(files, name)
	}

	var order []string
	byExp := map[string][]ChaosRow{}
	for _, c := range r.Chaos {
		if c.Load == nil {
			continue
		}
		if _, ok := byExp[c.Experiment]; !ok {
			order = append(order, c.Experiment)
		}
		byExp[c.Experiment] = append(byExp[c.Experiment], c)
	}
	for _, exp := range order {
		p := plot.New()
		when := fmt.Sprintf("at %v", chaosAt)
		if strings.Contains(exp, "flood") {
			when = "for the whole run"
		}
		p.Title.Text = fmt.Sprintf("%s %s: answered lookups/s (solid), lost+failed/s (dashed)", exp, when)
		p.X.Label.Text = "second of the run"
		p.Y.Label.Text = "lookups per second"
		p.Add(plotter.NewGrid())
		for _, c := range byExp[exp] {
			var ok, bad plotter.XYs
			for _, s := range c.Load.Series {
				ok = append(ok, plotter.XY{X: float64(s.T), Y: float64(s.OK + s.NXDomain)})
				bad = append(bad, plotter.XY{X: float64(s.T), Y: float64(s.Failed + s.Timeouts)})
			}
			lo, err := plotter.NewLine(ok)
			if err != nil {
				return files, err
			}
			lb, err := plotter.NewLine(bad)
			if err != nil {
				return files, err
			}
			lo.Color, lb.Color = designColors[c.Design], designColors[c.Design]
			lo.Width, lb.Width = vg.Points(1.5), vg.Points(1.5)
			lb.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(lo, lb)
			p.Legend.Add(c.Design, lo)
		}
		p.Legend.Top = true
		p.Legend.Left = false
		p.Legend.XOffs = -vg.Points(4)
		name := "chaos-" + strings.ReplaceAll(strings.ToLower(exp), " ", "-") + ".png"
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, name)); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

// latencyPlot draws every design's latency distribution: the CDF on a log
// x axis, or with ccdf the complementary CDF on log-log axes. It returns
// the plot and the number of designs drawn.
func (r *Report) latencyPlot(ccdf bool) (*plot.Plot, int, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Lookup latency, %d lookups/s, mix %s", r.Config.Rate, r.Config.Mix)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of answered lookups"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = false, false
	if ccdf {
		p.Title.Text = fmt.Sprintf("Lookup latency tail, %d lookups/s, mix %s", r.Config.Rate, r.Config.Mix)
		p.Y.Label.Text = "fraction of answered lookups slower (log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Left = true // the curves fall to the right
	}
	p.Add(plotter.NewGrid())
	lines := 0
	for _, row := range r.Rows {
		if row.Load == nil {
			continue
		}
		pts := cdfPoints(row.Load.Hist().CDF())
		if ccdf {
			pts = ccdfPoints(row.Load.Hist().CDF())
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, 0, err
		}
		l.Color = designColors[row.Design]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(row.Design, l)
		lines++
	}
	return p, lines, nil
}

// cdfPoints turns (ns, fraction at or below) points into (ms, fraction),
// dropping a zero latency, which a log axis cannot show.
func cdfPoints(cdf [][2]float64) plotter.XYs {
	var pts plotter.XYs
	for _, pt := range cdf {
		if ms := pt[0] / 1e6; ms > 0 {
			pts = append(pts, plotter.XY{X: ms, Y: pt[1]})
		}
	}
	return pts
}

// ccdfPoints turns (ns, fraction at or below) points into (ms, fraction
// above): the survival function, whose log scale spreads p99 (0.01),
// p99.9 (0.001) and beyond evenly. The last point, with no lookup slower,
// has no place on a log axis: the curve ends at the slowest bucket but
// one, whose fraction is at least one lookup in all of them.
func ccdfPoints(cdf [][2]float64) plotter.XYs {
	var pts plotter.XYs
	for _, pt := range cdf {
		ms, above := pt[0]/1e6, 1-pt[1]
		if ms > 0 && above > 1e-12 {
			pts = append(pts, plotter.XY{X: ms, Y: above})
		}
	}
	return pts
}
