package apicost

import "math"

// Fit is a least-squares line y = Intercept + PerNode·x over the node counts.
type Fit struct {
	Intercept, PerNode float64
	R2                 float64 // coefficient of determination; NaN with fewer than 3 points
	Points             int
}

// At is the line's value at x nodes.
func (f Fit) At(x float64) float64 { return f.Intercept + f.PerNode*x }

// fitLine fits y against x by ordinary least squares.
func fitLine(x, y []float64) Fit {
	n := float64(len(x))
	f := Fit{Points: len(x), R2: math.NaN()}
	if len(x) < 2 || len(x) != len(y) {
		return f
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return f
	}
	f.PerNode = (n*sxy - sx*sy) / den
	f.Intercept = (sy - f.PerNode*sx) / n
	if len(x) >= 3 {
		mean := sy / n
		var ssRes, ssTot float64
		for i := range x {
			d := y[i] - f.At(x[i])
			ssRes += d * d
			ssTot += (y[i] - mean) * (y[i] - mean)
		}
		if ssTot > 0 {
			f.R2 = 1 - ssRes/ssTot
		}
	}
	return f
}
