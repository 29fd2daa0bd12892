package gen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram bucket layout: values below 2^subBits ns get a bucket each;
// above, every power of two is split into 2^subBits buckets, so a bucket
// is at most 1/64 (1.6%) of its values wide. 3776 buckets cover every
// int64 duration.
const (
	subBits    = 6
	subBuckets = 1 << subBits
	nBuckets   = (64 - subBits) * subBuckets
)

// Histogram records durations with a bounded relative error (see
// subBits). The zero value is empty and ready; it is not safe for
// concurrent use.
type Histogram struct {
	counts [nBuckets]uint64
	n      uint64
	sum    time.Duration
	min    time.Duration
	max    time.Duration
}

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	return (shift+1)*subBuckets + int(v>>shift) - subBuckets
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi time.Duration) {
	if i < subBuckets {
		return time.Duration(i), time.Duration(i)
	}
	shift := i/subBuckets - 1
	l := uint64(subBuckets+i%subBuckets) << shift
	return time.Duration(l), time.Duration(l + 1<<shift - 1)
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(d)]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds every value of o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of values.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest value (exact).
func (h *Histogram) Max() time.Duration { return h.max }

// Min returns the smallest value (exact).
func (h *Histogram) Min() time.Duration { return h.min }

// Mean returns the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the value below or at which a fraction q of the values
// lie: the upper bound of the bucket holding the value of rank ceil(q*n),
// clamped to [Min, Max]. It overstates the true value by at most one
// bucket width (1.6%), never understates it.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.min
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			return min(max(hi, h.min), h.max)
		}
	}
	return h.max
}

// CDF returns (value, fraction ≤ value) points, one per non-empty bucket,
// for plotting.
func (h *Histogram) CDF() [][2]float64 {
	var out [][2]float64
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		_, hi := bucketBounds(i)
		out = append(out, [2]float64{float64(min(hi, h.max)), float64(seen) / float64(h.n)})
	}
	return out
}

// Bucket is one non-empty bucket of a Histogram, for JSON: its index in
// the fixed layout and its count.
type Bucket struct {
	Index int    `json:"i"`
	Count uint64 `json:"n"`
}

// Buckets returns the non-empty buckets.
func (h *Histogram) Buckets() []Bucket {
	var out []Bucket
	for i, c := range h.counts {
		if c > 0 {
			out = append(out, Bucket{i, c})
		}
	}
	return out
}

// HistogramFrom rebuilds a histogram from Buckets and the exact min, max
// and mean they were taken with.
func HistogramFrom(bs []Bucket, minV, maxV, mean time.Duration) *Histogram {
	h := &Histogram{min: minV, max: maxV}
	for _, b := range bs {
		if b.Index >= 0 && b.Index < nBuckets {
			h.counts[b.Index] += b.Count
			h.n += b.Count
		}
	}
	h.sum = mean * time.Duration(h.n)
	return h
}

// CountAbove returns how many values are certainly above d: those in
// buckets whose smallest value is above d.
func (h *Histogram) CountAbove(d time.Duration) uint64 {
	var n uint64
	for i := bucketOf(d) + 1; i < nBuckets; i++ {
		n += h.counts[i]
	}
	return n
}
