package gen

import (
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
