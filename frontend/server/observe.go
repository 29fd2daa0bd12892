package server

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// This file holds what the server records about each query's client: the
// query log (sampled, per zone) and the top talkers (counts per source
// address over the last minute). Both are off unless configured; a query
// then pays one nil check (Server.obs).

// QueryLog configures the query log: one structured log line (zap, the
// frontend's JSON log) per sampled query.
type QueryLog struct {
	// Zones lists the zones whose queries are logged; "." is every name.
	// Empty: no query log.
	Zones []string
	// Sample is the fraction of the queries in Zones that are logged, in
	// (0, 1]. 0 means 1.
	Sample float64
}

// ParseQueryLog parses --query-log (ZONE[,ZONE]... or "." for every
// name; empty is off) and --query-log-sample.
func ParseQueryLog(zones string, sample float64) (QueryLog, error) {
	if math.IsNaN(sample) || sample <= 0 || sample > 1 {
		return QueryLog{}, fmt.Errorf("sample %v: must be in (0, 1]", sample)
	}
	q := QueryLog{Sample: sample}
	for _, z := range strings.Split(zones, ",") {
		z = strings.TrimSpace(z)
		if z == "" {
			continue
		}
		if _, ok := dns.IsDomainName(z); !ok {
			return QueryLog{}, fmt.Errorf("zone %q is not a domain name", z)
		}
		q.Zones = append(q.Zones, dns.CanonicalName(z))
	}
	return q, nil
}

// DefaultTopTalkers is the frontend's default --top-talkers: the sources
// each talker table tracks. A node runs at most a few hundred pods
// (kubelet's default limit is 110); an entry takes about 200 bytes, so a
// full table about 200 KiB.
const DefaultTopTalkers = 1000

// TalkerWindow is the period the top talkers count over: the last
// talkerSlots slots of talkerSlot each (the current slot is partial, so
// the counts cover between 45 and 60 seconds).
const (
	talkerSlot   = 15 * time.Second
	talkerSlots  = 4
	TalkerWindow = talkerSlot * talkerSlots
)

// outcome says how a query was answered, for the query log and the top
// talkers.
type outcome uint8

const (
	answerHit      outcome = iota // ServeFast: the cache, or an answer made locally
	answerMiss                    // ServeSlow: the backend (or stale, or SERVFAIL when it fails)
	answerOverload                // refused for capacity: Overloaded (stale or SERVFAIL)
	answerDenied                  // outside --allow-networks: REFUSED
)

var answerNames = [...]string{"hit", "miss", "overload", "denied"}

// observer is the server's query log and top-talker counting; nil when
// both are off.
type observer struct {
	log *zap.Logger // the query log; nil when off
	// threshold: a query is sampled when a random uint64 is below it.
	threshold uint64
	all       bool     // log every zone
	zones     []string // canonical names, when not all
	// maxTalkers bounds the sources each talker table tracks; 0: off.
	maxTalkers int
	epoch      atomic.Int64 // the current talker slot (unix time / talkerSlot)
	tcpTalkers *talkers     // TCP queries' table (UDP ones are per socket)
}

func newObserver(q QueryLog, maxTalkers int, log *zap.Logger) *observer {
	if len(q.Zones) == 0 && maxTalkers <= 0 {
		return nil
	}
	o := &observer{maxTalkers: max(0, maxTalkers)}
	if len(q.Zones) > 0 {
		o.log = log
		s := q.Sample
		if s <= 0 || s >= 1 {
			o.threshold = math.MaxUint64
		} else {
			o.threshold = uint64(s * (1 << 63) * 2)
		}
		o.all = slices.Contains(q.Zones, ".")
		o.zones = q.Zones
	}
	o.tick(time.Now())
	o.tcpTalkers = o.newTalkers()
	return o
}

func (o *observer) tick(now time.Time) { o.epoch.Store(now.Unix() / int64(talkerSlot/time.Second)) }

// run keeps the epoch current until done is closed.
func (o *observer) run(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			o.tick(now)
		}
	}
}

// sample reports whether this query is to be logged (before its name is
// looked at: the zone is checked only for the sampled ones).
func (o *observer) sample() bool {
	return o.log != nil && (o.threshold == math.MaxUint64 || rand.Uint64() < o.threshold)
}

func (o *observer) newTalkers() *talkers {
	if o.maxTalkers <= 0 {
		return nil
	}
	return &talkers{max: o.maxTalkers, m: make(map[srcKey]*talker)}
}

// logQuery writes the query log line of a sampled query, if its name is
// in one of the zones.
func (o *observer) logQuery(src srcKey, p Proto, req, resp []byte, a outcome, start time.Time) {
	name, qtype, ok := question(req)
	if !ok {
		name = "" // logged all the same when every zone is: a malformed query
		if !o.all {
			return
		}
	} else if !o.all && !o.inZones(name) {
		return
	}
	rcode := "none" // dropped: no answer
	if len(resp) >= headerLen {
		rcode = dns.RcodeToString[int(resp[3]&0xf)]
	}
	proto := "udp"
	if p.IsTCP() {
		proto = "tcp"
	}
	o.log.Info("query",
		zap.String("client", netip.AddrFrom16(src).Unmap().String()),
		zap.String("proto", proto),
		zap.String("name", name),
		zap.String("type", dns.Type(qtype).String()),
		zap.String("rcode", rcode),
		zap.String("answer", answerNames[a]),
		zap.Duration("latency", time.Since(start)))
}

func (o *observer) inZones(name string) bool {
	for _, z := range o.zones {
		if dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

// question returns the first question's name (canonical: lower case,
// with the root dot) and type.
func question(req []byte) (string, uint16, bool) {
	n := questionLen(req)
	if n == 0 {
		return "", 0, false
	}
	name, _, err := dns.UnpackDomainName(req, headerLen)
	if err != nil {
		return "", 0, false
	}
	q := req[headerLen+n-4:]
	return dns.CanonicalName(name), uint16(q[0])<<8 | uint16(q[1]), true
}

// talkerCount selects a counter of a talker.
type talkerCount uint8

const (
	countQueries    talkerCount = iota
	countNXDomain               // answered NXDOMAIN
	countServfail               // answered SERVFAIL
	countRefused                // answered REFUSED (zone transfer, --allow-networks, the backend)
	countOverloaded             // refused for capacity (answer: stale or SERVFAIL)
	numCounts
)

// talker holds one source's counts, by slot (epoch % talkerSlots).
type talker struct {
	slots [talkerSlots]struct {
		epoch int64
		n     [numCounts]uint32
	}
}

// add counts one query in the slot of epoch.
func (t *talker) add(epoch int64, rcode byte, a outcome) {
	s := &t.slots[epoch%talkerSlots]
	if s.epoch != epoch {
		s.epoch, s.n = epoch, [numCounts]uint32{}
	}
	s.n[countQueries]++
	switch rcode {
	case dns.RcodeNameError:
		s.n[countNXDomain]++
	case dns.RcodeServerFailure:
		s.n[countServfail]++
	case dns.RcodeRefused:
		s.n[countRefused]++
	}
	if a == answerOverload {
		s.n[countOverloaded]++
	}
}

// sum adds the counts of the slots in the window ending at epoch to n;
// false when there were none.
func (t *talker) sum(epoch int64, n *[numCounts]uint64) bool {
	any := false
	for i := range t.slots {
		s := &t.slots[i]
		if s.epoch > epoch-talkerSlots && s.epoch <= epoch {
			for c := range n {
				n[c] += uint64(s.n[c])
			}
			any = any || s.n[countQueries] > 0
		}
	}
	return any
}

// talkers counts queries per source address. One table serves each UDP
// socket (its reader and its misses) and one all TCP queries, so that
// readers never wait for each other. It tracks at most max sources: a
// new source past that, once the sources silent for a whole window are
// dropped, is counted under "other" (Talker.Addr "other") instead.
type talkers struct {
	mu    sync.Mutex
	max   int
	m     map[srcKey]*talker
	other talker
	swept int64 // epoch of the last sweep: at most one a slot
}

// add counts one query of src. t.mu must be held.
func (t *talkers) add(epoch int64, src srcKey, resp []byte, a outcome) {
	var rcode byte = 0xff
	if len(resp) >= headerLen {
		rcode = resp[3] & 0xf
	}
	e := t.m[src]
	if e == nil {
		if len(t.m) >= t.max && t.swept != epoch {
			t.sweep(epoch)
		}
		if len(t.m) >= t.max {
			t.other.add(epoch, rcode, a)
			return
		}
		e = new(talker)
		t.m[src] = e
	}
	e.add(epoch, rcode, a)
}

// sweep drops the sources with nothing counted in the window.
func (t *talkers) sweep(epoch int64) {
	t.swept = epoch
	for k, e := range t.m {
		var n [numCounts]uint64
		if !e.sum(epoch, &n) {
			delete(t.m, k)
		}
	}
}

// Talker is one source's counts over the last TalkerWindow.
type Talker struct {
	// Addr is the client's address, or "other" for the sources past the
	// tracking limit.
	Addr       string `json:"addr"`
	Queries    uint64 `json:"queries"`
	NXDomain   uint64 `json:"nxdomain"`
	Servfail   uint64 `json:"servfail"`
	Refused    uint64 `json:"refused"`
	Overloaded uint64 `json:"overloaded"`
}

// Talkers is what TopTalkers returns (and the /top endpoint serves).
type Talkers struct {
	WindowSeconds int      `json:"window_seconds"`
	MaxSources    int      `json:"max_sources"`
	Talkers       []Talker `json:"talkers"`
}

// ErrNoTalkers is returned by TopTalkers when counting is off.
var ErrNoTalkers = errors.New("top talkers are not counted (--top-talkers=0)")

// TopTalkers returns the n sources that sent the most queries over the
// last TalkerWindow (all when n <= 0), most first.
func (s *Server) TopTalkers(n int) (Talkers, error) {
	o := s.obs
	if o == nil || o.maxTalkers <= 0 {
		return Talkers{}, ErrNoTalkers
	}
	epoch := o.epoch.Load()
	sums := map[string]*[numCounts]uint64{}
	collect := func(t *talkers) {
		t.mu.Lock()
		defer t.mu.Unlock()
		add := func(k string, e *talker) {
			n := sums[k]
			if n == nil {
				n = new([numCounts]uint64)
			}
			if e.sum(epoch, n) {
				sums[k] = n
			}
		}
		for k, e := range t.m {
			add(netip.AddrFrom16(k).Unmap().String(), e)
		}
		add("other", &t.other)
	}
	s.mu.Lock()
	for _, u := range s.udp {
		collect(u.talk)
	}
	s.mu.Unlock()
	collect(o.tcpTalkers)
	out := Talkers{WindowSeconds: int(TalkerWindow / time.Second), MaxSources: o.maxTalkers, Talkers: []Talker{}}
	for k, n := range sums {
		out.Talkers = append(out.Talkers, Talker{Addr: k, Queries: n[countQueries], NXDomain: n[countNXDomain],
			Servfail: n[countServfail], Refused: n[countRefused], Overloaded: n[countOverloaded]})
	}
	slices.SortFunc(out.Talkers, func(a, b Talker) int {
		if a.Queries != b.Queries {
			if a.Queries > b.Queries {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	if n > 0 && len(out.Talkers) > n {
		out.Talkers = out.Talkers[:n]
	}
	return out, nil
}

// note records a query that was answered (resp, nil when dropped): its
// source's counts in t (nil: off; t.mu held by the caller when lock is
// false) and, when sampled, its query log line.
func (o *observer) note(t *talkers, lock bool, src srcKey, p Proto, req, resp []byte, a outcome, sampled bool, start time.Time) {
	if t != nil {
		if lock {
			t.mu.Lock()
		}
		t.add(o.epoch.Load(), src, resp, a)
		if lock {
			t.mu.Unlock()
		}
	}
	if sampled {
		o.logQuery(src, p, req, resp, a, start)
	}
}
