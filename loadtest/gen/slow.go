package gen

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// keepSlowest is how many of the slowest answered lookups a Result keeps.
const keepSlowest = 16

// Slow is one of the slowest answered lookups of a run, with what it is
// made of, so that a tail can be traced to its cause: a generator that
// started the lookup late (Late), one slow exchange (SlowestExchange of
// SlowestName), or retries. Due is wall-clock time, to line it up with
// the servers' logs (zap's timestamps, GODEBUG=gctrace's lines counted
// from each process's start).
type Slow struct {
	Due     time.Time     `json:"due"`
	Latency time.Duration `json:"latency_ns"`
	// Late is how long after Due the lookup's goroutine began it.
	Late            time.Duration `json:"late_ns"`
	Outcome         string        `json:"outcome"`
	Queries         int           `json:"queries"`
	Retries         int           `json:"retries"`
	SlowestExchange time.Duration `json:"slowest_exchange_ns"`
	SlowestName     string        `json:"slowest_name"`
}

// slowList holds at most keepSlowest lookups, slowest first.
type slowList []Slow

func (l slowList) admits(d time.Duration) bool {
	return len(l) < keepSlowest || d > l[len(l)-1].Latency
}

func (l *slowList) add(s Slow) {
	i := sort.Search(len(*l), func(i int) bool { return (*l)[i].Latency < s.Latency })
	*l = append(*l, Slow{})
	copy((*l)[i+1:], (*l)[i:])
	(*l)[i] = s
	if len(*l) > keepSlowest {
		*l = (*l)[:keepSlowest]
	}
}

// WriteSlowest writes the slowest lookups, one a line.
func (r *Result) WriteSlowest(w io.Writer) error {
	for _, s := range r.Slowest {
		if _, err := fmt.Fprintf(w, "%s  %-8v late %-8v %s, %d queries (%d resent), slowest exchange %v: %s\n",
			s.Due.UTC().Format("15:04:05.000000"), round(s.Latency), round(s.Late), s.Outcome,
			s.Queries, s.Retries, round(s.SlowestExchange), s.SlowestName); err != nil {
			return err
		}
	}
	return nil
}
