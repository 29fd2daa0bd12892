package apicost

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// designColors keeps a design's colour the same in every panel.
var designColors = map[Design]color.Color{
	DesignKubeProxy: color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff},
	DesignCoreDNS:   color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	DesignNodedns:   color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

// simPanels are the figure's panels: kube-apiserver's cost over the no-agent
// window of the same phase, against the simulated node count.
var simPanels = []struct {
	phase, title, unit string
	value              func(r, base Result) float64
}{
	{PhaseIdle, "steady, no churn", "apiserver CPU cores over no agents",
		func(r, b Result) float64 { return r.CPUCores() - b.CPUCores() }},
	// Per endpoint update per second: the update rate of one window can
	// differ from another's on a loaded machine.
	{PhaseChurn, "endpoint churn", "apiserver CPU cores over no agents per update/s",
		func(r, b Result) float64 {
			return (r.CPUCores() - b.CPUCores()) / (r.ChurnUpdates / r.Seconds)
		}},
	{PhaseRestart, "API server restart (relist storm)", "apiserver CPU s over no agents",
		func(r, b Result) float64 { return r.APICPU - b.APICPU }},
}

// WriteSimPlot writes the -simulate figure (PNG): one panel per phase, one
// measured line per design through its node counts.
func WriteSimPlot(path string, rep *Report) (err error) {
	defer func() {
		// gonum/plot panics on degenerate data.
		if v := recover(); v != nil {
			err = fmt.Errorf("plot: %v", v)
		}
	}()
	row := make([]*plot.Plot, len(simPanels))
	for i, panel := range simPanels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "simulated nodes"
		p.Y.Label.Text = panel.unit
		p.Add(plotter.NewGrid())
		base, ok := rep.simRow("", 0, panel.phase)
		if !ok {
			return fmt.Errorf("plot: no no-agent window for %s", panel.phase)
		}
		for _, d := range Designs {
			var xys plotter.XYs
			for _, n := range rep.Config.Simulate {
				if r, ok := rep.simRow(d, n, panel.phase); ok {
					xys = append(xys, plotter.XY{X: float64(n), Y: panel.value(r.Result, base.Result)})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color, pts.Color = designColors[d], designColors[d]
			p.Add(l, pts)
			p.Legend.Add(string(d), l, pts)
		}
		p.Legend.Top, p.Legend.Left = true, true
		row[i] = p
	}
	img := vgimg.New(15*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: 8 * vg.Millimeter, PadTop: 2 * vg.Millimeter,
		PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
