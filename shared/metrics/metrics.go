// Package metrics holds what the nodedns frontend's packages share for
// Prometheus: the namespaces, series names, help texts, the /metrics handler
// and a reader of a set's current values.
//
// Series live in github.com/VictoriaMetrics/metrics sets: counters, gauges
// and Prometheus histograms without the reflection and protobuf machinery
// of the Prometheus client, which would add about 2.4 MB to the binary that
// runs on every node, nearly all of it resident.
package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/nodedns/nodedns/shared/httpserve"
)

const (
	// Namespace prefixes every series that is new in nodedns.
	Namespace = "nodedns"
	// CoreDNSNamespace prefixes series whose meaning matches CoreDNS's own,
	// so that existing CoreDNS dashboards keep working.
	CoreDNSNamespace = "coredns"
)

func init() {
	// # TYPE lines, so that Prometheus knows counters from gauges.
	vm.ExposeMetadata(true)
}

// NewSet returns an empty set. Each process (and each test) owns its set;
// nothing uses the library's global one.
func NewSet() *vm.Set { return vm.NewSet() }

// Name returns the series name family{k1="v1",k2="v2"} for labels given as
// key, value pairs, in that order, with values escaped as the text format
// requires. Name panics on an odd number of label arguments.
func Name(family string, labels ...string) string {
	if len(labels)%2 != 0 {
		panic("metrics.Name: odd number of label arguments for " + family)
	}
	if len(labels) == 0 {
		return family
	}
	var b strings.Builder
	b.WriteString(family)
	b.WriteByte('{')
	for i := 0; i < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(escaper.Replace(labels[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var escaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

var (
	helpMu sync.RWMutex
	help   = map[string]string{}
)

// Help records the help text /metrics shows for a family. Registering the
// same family again (a second set in tests) keeps the first text.
func Help(family, text string) {
	helpMu.Lock()
	defer helpMu.Unlock()
	if _, ok := help[family]; !ok {
		help[family] = text
	}
}

// ContentType is the media type of the exposition Handler writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the sets, then the Go runtime (go_*, runtime.go) and
// process (process_*, process.go) series, in the Prometheus text format,
// each family with its HELP and TYPE once.
func Handler(sets ...*vm.Set) httpserve.Handler {
	return func(body *bytes.Buffer) (int, string) {
		var buf bytes.Buffer
		for _, s := range sets {
			s.WritePrometheus(&buf)
		}
		writeWithHelp(body, buf.Bytes())
		writeGoMetrics(body)
		writeProcessMetrics(body, procSelf)
		return 200, ContentType
	}
}

// writeWithHelp copies the exposition to w, completing the library's bare
// "# HELP family" lines with the texts given to Help, and keeping only the
// first HELP and the first TYPE line of each family: writers that each
// write one series of a family (sharded histograms with different labels,
// made one after the other) each write its metadata, and the text format
// allows it once.
func writeWithHelp(w *bytes.Buffer, text []byte) {
	helpMu.RLock()
	defer helpMu.RUnlock()
	seen := map[string]bool{} // "HELP family", "TYPE family"
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line = text[:i+1]
		}
		text = text[len(line):]
		kind, family, ok := metadata(line)
		if !ok {
			w.Write(line)
			continue
		}
		key := kind + " " + family
		if seen[key] {
			continue
		}
		seen[key] = true
		if h := help[family]; kind == "HELP" && h != "" {
			fmt.Fprintf(w, "# HELP %s %s\n", family, helpEscaper.Replace(h))
			continue
		}
		w.Write(line)
	}
}

// metadata returns the kind (HELP or TYPE) and family of a metadata line.
func metadata(line []byte) (kind, family string, ok bool) {
	rest, ok := bytes.CutPrefix(line, []byte("# "))
	if !ok {
		return "", "", false
	}
	k, rest, ok := bytes.Cut(rest, []byte(" "))
	if !ok || string(k) != "HELP" && string(k) != "TYPE" {
		return "", "", false
	}
	f, _, _ := bytes.Cut(bytes.TrimSuffix(rest, []byte("\n")), []byte(" "))
	return string(k), string(f), true
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// Values returns the current value of every series in s, keyed by the name
// as Name spells it (histograms as family_bucket{...,le="..."}, _sum and
// _count). For tests, and for anything that reads its own process's series.
func Values(s *vm.Set) map[string]float64 {
	var buf bytes.Buffer
	s.WritePrometheus(&buf)
	v, err := parse(buf.Bytes())
	if err != nil {
		panic(err) // the library wrote it; a parse error is a bug here
	}
	return v
}

// parse reads the samples of a text exposition: name (with labels) and
// value per line, comments skipped.
func parse(text []byte) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			return nil, fmt.Errorf("metrics: no value in line %q", line)
		}
		f, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		out[line[:i]] = f
	}
	return out, sc.Err()
}
