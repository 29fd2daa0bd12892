package gen

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The cluster the built-in mixes assume: pods run in BuiltinNamespace,
// and BuiltinNamespace and BuiltinOtherNamespace each hold the Services
// svc-0 … svc-<BuiltinServices-1>.
const (
	BuiltinNamespace      = "team-a"
	BuiltinOtherNamespace = "team-b"
	BuiltinServices       = 20
	// FloodZone is the zone of the random names of the "flood" mix; an
	// upstream answers NXDOMAIN for all of it.
	FloodZone = "flood.example.net."
	// ExternalZone is the zone of the "external" mix's names.
	ExternalZone = "example.com."
)

// builtinMixes are the mixes by name: name patterns with weights. In
// patterns, {n:K} is a random integer in [0,K) and {rand} a random
// 12-letter label, drawn per lookup.
var builtinMixes = map[string][]Entry{
	// In-cluster Service names as applications write them: mostly short
	// names in the pod's namespace, then other namespaces, a few FQDNs.
	"cluster": {
		{"svc-{n:20}", 60},
		{"svc-{n:20}." + BuiltinOtherNamespace, 20},
		{"svc-{n:20}." + BuiltinOtherNamespace + ".svc.cluster.local.", 10},
		{"kubernetes.default", 10},
	},
	// Names outside the cluster, written without a trailing dot, so
	// ndots:5 sends each through the whole search path first.
	"external": {
		{"www{n:50}.example.com", 80},
		{"api.example.com", 20},
	},
	// A random-subdomain flood: every name is new and does not exist.
	"flood": {
		{"{rand}." + strings.TrimSuffix(FloodZone, "."), 1},
	},
	// The comparison's mix.
	"default": {
		{"svc-{n:20}", 45},
		{"svc-{n:20}." + BuiltinOtherNamespace, 15},
		{"svc-{n:20}." + BuiltinOtherNamespace + ".svc.cluster.local.", 7},
		{"kubernetes.default", 8},
		{"www{n:50}.example.com", 16},
		{"api.example.com", 4},
		{"{rand}." + strings.TrimSuffix(FloodZone, "."), 5},
	},
}

// BuiltinMixes returns the names of the built-in mixes.
func BuiltinMixes() []string {
	var names []string
	for n := range builtinMixes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Entry is one name pattern of a mix and its relative weight.
type Entry struct {
	Pattern string
	Weight  float64
}

// Mix draws names from weighted patterns. It is immutable and safe for
// concurrent use with one *rand.Rand per goroutine.
type Mix struct {
	entries []Entry
	cum     []float64 // cumulative weights
}

// NewMix builds a mix; weights must be positive.
func NewMix(entries []Entry) (*Mix, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("mix: no names")
	}
	m := &Mix{entries: entries}
	total := 0.0
	for _, e := range entries {
		if !(e.Weight > 0) {
			return nil, fmt.Errorf("mix: %q: weight %v is not positive", e.Pattern, e.Weight)
		}
		if err := checkPattern(e.Pattern); err != nil {
			return nil, err
		}
		total += e.Weight
		m.cum = append(m.cum, total)
	}
	return m, nil
}

// ParseMix reads a mix specification: comma-separated parts, each a
// built-in mix name or file:PATH, optionally followed by :WEIGHT (the
// part's share; default 1). "cluster:80,flood:20" is four parts cluster
// to one part flood.
func ParseMix(spec string) (*Mix, error) {
	var all []Entry
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		share := 1.0
		if i := strings.LastIndexByte(part, ':'); i >= 0 {
			if w, err := strconv.ParseFloat(part[i+1:], 64); err == nil {
				if !(w > 0) {
					return nil, fmt.Errorf("mix %q: weight of %q is not positive", spec, part)
				}
				share, part = w, part[:i]
			}
		}
		var entries []Entry
		if path, ok := strings.CutPrefix(part, "file:"); ok {
			var err error
			if entries, err = ReadMixFile(path); err != nil {
				return nil, err
			}
		} else if b, ok := builtinMixes[part]; ok {
			entries = b
		} else {
			return nil, fmt.Errorf("mix %q: %q is neither file:PATH nor one of %s", spec, part, strings.Join(BuiltinMixes(), ", "))
		}
		total := 0.0
		for _, e := range entries {
			total += e.Weight
		}
		for _, e := range entries {
			all = append(all, Entry{e.Pattern, share * e.Weight / total})
		}
	}
	return NewMix(all)
}

// ReadMixFile reads a mix file: one pattern per line, optionally followed
// by a weight (default 1); blank lines and lines starting with # are
// skipped.
func ReadMixFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mix file: %w", err)
	}
	defer f.Close()
	var entries []Entry
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e := Entry{Pattern: fields[0], Weight: 1}
		if len(fields) > 2 {
			return nil, fmt.Errorf("%s:%d: want `name [weight]`", path, line)
		}
		if len(fields) == 2 {
			if e.Weight, err = strconv.ParseFloat(fields[1], 64); err != nil {
				return nil, fmt.Errorf("%s:%d: weight: %w", path, line, err)
			}
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mix file %s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("mix file %s: no names", path)
	}
	return entries, nil
}

// Entries returns the mix's patterns with weights normalised to sum 1.
func (m *Mix) Entries() []Entry {
	total := m.cum[len(m.cum)-1]
	out := make([]Entry, len(m.entries))
	for i, e := range m.entries {
		out[i] = Entry{e.Pattern, e.Weight / total}
	}
	return out
}

// Name draws one name.
func (m *Mix) Name(r *rand.Rand) string {
	name, _ := m.Draw(r)
	return name
}

// Draw draws one name and returns it with the index of the entry (in
// Entries' order) whose pattern made it.
func (m *Mix) Draw(r *rand.Rand) (name string, entry int) {
	x := r.Float64() * m.cum[len(m.cum)-1]
	i := sort.SearchFloat64s(m.cum, x)
	if i == len(m.cum) {
		i--
	}
	return expandPattern(m.entries[i].Pattern, r), i
}

// Len returns the number of entries.
func (m *Mix) Len() int { return len(m.entries) }

// Pattern returns entry i's pattern as written in the mix.
func (m *Mix) Pattern(i int) string { return m.entries[i].Pattern }

const letters = "abcdefghijklmnopqrstuvwxyz0123456789"

func expandPattern(p string, r *rand.Rand) string {
	if !strings.Contains(p, "{") {
		return p
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(p, '{')
		if i < 0 {
			b.WriteString(p)
			return b.String()
		}
		j := strings.IndexByte(p[i:], '}') + i
		b.WriteString(p[:i])
		tok := p[i+1 : j]
		p = p[j+1:]
		if tok == "rand" {
			for range 12 {
				b.WriteByte(letters[r.IntN(len(letters))])
			}
			continue
		}
		k, _ := strconv.Atoi(strings.TrimPrefix(tok, "n:")) // checked by checkPattern
		b.WriteString(strconv.Itoa(r.IntN(k)))
	}
}

func checkPattern(p string) error {
	if p == "" || strings.ContainsAny(p, " \t") {
		return fmt.Errorf("mix: bad name %q", p)
	}
	for rest := p; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return fmt.Errorf("mix: %q: unclosed {", p)
		}
		tok := rest[i+1 : i+j]
		if tok != "rand" {
			k, err := strconv.Atoi(strings.TrimPrefix(tok, "n:"))
			if !strings.HasPrefix(tok, "n:") || err != nil || k <= 0 {
				return fmt.Errorf("mix: %q: {%s} is neither {rand} nor {n:K} with K > 0", p, tok)
			}
		}
		rest = rest[i+j+1:]
	}
}
