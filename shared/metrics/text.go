package metrics

import (
	"bytes"
	"math"
	"strconv"
)

// Writers of the series this package makes itself (go_*, process_*), in
// the Prometheus text format 0.0.4: each family's HELP and TYPE once,
// right before its samples.

// writeFamily writes the metadata of one family.
func writeFamily(w *bytes.Buffer, name, typ, help string) {
	w.WriteString("# HELP ")
	w.WriteString(name)
	w.WriteByte(' ')
	w.WriteString(helpEscaper.Replace(help))
	w.WriteString("\n# TYPE ")
	w.WriteString(name)
	w.WriteByte(' ')
	w.WriteString(typ)
	w.WriteByte('\n')
}

// writeSample writes one sample line; name may carry labels.
func writeSample(w *bytes.Buffer, name string, v float64) {
	w.WriteString(name)
	w.WriteByte(' ')
	var b [32]byte
	switch {
	case math.IsInf(v, 1):
		w.WriteString("+Inf")
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		w.Write(strconv.AppendInt(b[:0], int64(v), 10))
	default:
		w.Write(strconv.AppendFloat(b[:0], v, 'g', -1, 64))
	}
	w.WriteByte('\n')
}

// writeGauge writes a family of one gauge sample.
func writeGauge(w *bytes.Buffer, name, help string, v float64) {
	writeFamily(w, name, "gauge", help)
	writeSample(w, name, v)
}

// writeCounter writes a family of one counter sample; name ends in _total.
func writeCounter(w *bytes.Buffer, name, help string, v float64) {
	writeFamily(w, name, "counter", help)
	writeSample(w, name, v)
}
