package metrics

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync/atomic"

	vm "github.com/VictoriaMetrics/metrics"
)

// Sharded series keep one copy of their values per P (the scheduler's
// processor a goroutine runs on, one per GOMAXPROCS) and add the copies up
// when /metrics is read. Each P writes its own copy (shard.go says how an
// update finds it), so readers on different cores do not write the same
// cache line: no lock and no cache-line ping-pong on the hit path however
// many cores serve it. The Prometheus
// client and VictoriaMetrics/metrics share one atomic per counter and one
// mutex per histogram among all cores.
//
// Each P's copy of a group of series is padded to whole cache lines. The
// updates stay atomic (an uncontended atomic add), so that a token whose
// number exceeds the shard count (GOMAXPROCS raised after the series were
// made, or the pool's tokens of shard.go) shares a shard correctly rather
// than losing counts.

// cacheLine is the unit of padding between shards; 128 bytes covers the
// adjacent-line prefetch of x86 and the 128-byte lines of some arm64 cores.
const cacheLine = 128

const wordsPerLine = cacheLine / 8

// shardCount is the number of copies: a power of two at least GOMAXPROCS
// and the number of CPUs the process may run on.
func shardCount() int {
	n := max(runtime.GOMAXPROCS(0), runtime.NumCPU(), 1)
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}

// block holds width words per shard, each shard's words starting on a
// cache line of their own.
type block struct {
	words []atomic.Uint64
	width int // words per shard, a multiple of wordsPerLine
	mask  int // shards - 1
}

func newBlock(words int) *block {
	width := (words + wordsPerLine - 1) / wordsPerLine * wordsPerLine
	n := shardCount()
	// One line of slack in front, so that the first shard does not share a
	// line with whatever the allocator put before the slice.
	all := make([]atomic.Uint64, wordsPerLine+n*width)
	return &block{words: all[wordsPerLine:], width: width, mask: n - 1}
}

// local returns the first word of shard n (wrapped to the shard count):
// the shard of a token from takeShard (shard.go).
func (b *block) local(n int) int { return (n & b.mask) * b.width }

// sum adds up word i of every shard.
func (b *block) sum(i int) uint64 {
	var v uint64
	for s := 0; s <= b.mask; s++ {
		v += b.words[s*b.width+i].Load()
	}
	return v
}

// ShardedCounter is a counter kept per P (see the package's sharded
// series). The zero value is not usable; get one from NewShardedCounters.
type ShardedCounter struct {
	b *block
	i int
}

// Inc adds one.
func (c ShardedCounter) Inc() { c.Add(1) }

// Add adds n, which must not be negative.
func (c ShardedCounter) Add(n int) {
	t := takeShard()
	c.b.words[c.b.local(t.n)+c.i].Add(uint64(n))
	putShard(t)
}

// Get returns the sum over all shards.
func (c ShardedCounter) Get() uint64 { return c.b.sum(c.i) }

// NewShardedCounters makes one counter per name (as Name spells it) and
// has set write them on every scrape, in the order given, each family's
// metadata before its first series. The counters of one call share their
// shards' cache lines, so a group updated together costs one line per P;
// the series of one family must all be made in one call, since a family's
// lines must not be split in the exposition.
func NewShardedCounters(set *vm.Set, names ...string) []ShardedCounter {
	b := newBlock(len(names))
	cs := make([]ShardedCounter, len(names))
	for i := range names {
		cs[i] = ShardedCounter{b: b, i: i}
	}
	names = append([]string(nil), names...)
	set.RegisterMetricsWriter(func(w io.Writer) {
		prev := ""
		for i, name := range names {
			if f := familyOf(name); f != prev {
				vm.WriteMetadataIfNeeded(w, name, "counter")
				prev = f
			}
			fmt.Fprintf(w, "%s %d\n", name, b.sum(i))
		}
	})
	return cs
}

// ShardedHistogram is a Prometheus histogram kept per P: cumulative
// _bucket series with le labels, _sum and _count, as the Prometheus client
// and VictoriaMetrics/metrics write them.
type ShardedHistogram struct {
	b      *block
	bounds []float64 // upper bounds, increasing; +Inf is implied
	// Words of a shard: bucket i (v <= bounds[i]) at i, v above every
	// bound at len(bounds), the sum's float64 bits at len(bounds)+1.
	name, family, labels string
	leNames              []string // name_bucket{...,le="..."} per bound and +Inf
}

// NewShardedHistogram makes a histogram series name (as Name spells it)
// with the given upper bounds, written by set on every scrape.
func NewShardedHistogram(set *vm.Set, name string, upperBounds []float64) *ShardedHistogram {
	if err := vm.ValidateBuckets(upperBounds); err != nil {
		panic(fmt.Sprintf("metrics.NewShardedHistogram %s: %v", name, err))
	}
	h := &ShardedHistogram{
		b:      newBlock(len(upperBounds) + 2),
		bounds: append([]float64(nil), upperBounds...),
		name:   name,
		family: familyOf(name),
	}
	h.labels = strings.TrimPrefix(name, h.family)
	for _, ub := range h.bounds {
		h.leNames = append(h.leNames, h.family+"_bucket"+withLabel(h.labels, fmt.Sprintf(`le="%v"`, ub)))
	}
	h.leNames = append(h.leNames, h.family+"_bucket"+withLabel(h.labels, `le="+Inf"`))
	set.RegisterMetricsWriter(h.write)
	return h
}

// Update records one observation of v; negative values and NaN are
// ignored, as the Prometheus histograms this replaces ignore them.
func (h *ShardedHistogram) Update(v float64) { h.UpdateN(v, 1) }

// UpdateN records n observations of v (a sampled measurement standing for
// n events).
func (h *ShardedHistogram) UpdateN(v float64, n int) {
	if n <= 0 || math.IsNaN(v) || v < 0 {
		return
	}
	i := len(h.bounds)
	for j, ub := range h.bounds {
		if v <= ub {
			i = j
			break
		}
	}
	t := takeShard()
	w := h.b.words[h.b.local(t.n):]
	w[i].Add(uint64(n))
	sum := &w[len(h.bounds)+1]
	add := v * float64(n)
	for {
		old := sum.Load()
		if sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+add)) {
			break
		}
	}
	putShard(t)
}

// write writes the histogram's series, summed over the shards.
func (h *ShardedHistogram) write(w io.Writer) {
	vm.WriteMetadataIfNeeded(w, h.name, "histogram")
	var cum uint64
	for i := range h.bounds {
		cum += h.b.sum(i)
		fmt.Fprintf(w, "%s %d\n", h.leNames[i], cum)
	}
	count := cum + h.b.sum(len(h.bounds))
	fmt.Fprintf(w, "%s %d\n", h.leNames[len(h.bounds)], count)
	var sum float64
	for s := 0; s <= h.b.mask; s++ {
		sum += math.Float64frombits(h.b.words[s*h.b.width+len(h.bounds)+1].Load())
	}
	if float64(int64(sum)) == sum {
		fmt.Fprintf(w, "%s_sum%s %d\n", h.family, h.labels, int64(sum))
	} else {
		fmt.Fprintf(w, "%s_sum%s %g\n", h.family, h.labels, sum)
	}
	fmt.Fprintf(w, "%s_count%s %d\n", h.family, h.labels, count)
}

// familyOf is the name without its labels.
func familyOf(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		return name[:i]
	}
	return name
}

// withLabel adds label (k="v") at the end of labels ("" or {...}).
func withLabel(labels, label string) string {
	if labels == "" || labels == "{}" {
		return "{" + label + "}"
	}
	return labels[:len(labels)-1] + "," + label + "}"
}
