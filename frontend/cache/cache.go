package cache

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/frontend/dnswire"
)

const (
	maxShards = 256
	// minShardSize keeps shards big enough for the segmented LRU to have a
	// useful probation segment in small caches.
	minShardSize = 16
	// clockTick is the resolution of the coarse clock that spares a hit the
	// cost of time.Now; TTLs are whole seconds.
	clockTick = 100 * time.Millisecond
)

// Cache is a sharded wire-format answer cache. Its methods are safe for
// concurrent use.
type Cache struct {
	cfg    Config
	seed   maphash.Seed
	shards []shard
	mask   uint64

	// count holds the positive and negative entries over all shards; an
	// insertion past the configured size evicts from its own shard, so the
	// evictions spread like the hashes. Shards also have a hard limit of
	// twice their share.
	count [2]atomic.Int64

	nowFn  func() time.Time // injected clock; nil means the coarse clock
	coarse atomic.Int64     // unix ns, updated every clockTick when nowFn is nil
	stop   chan struct{}
	done   chan struct{}
}

type shard struct {
	mu  sync.Mutex
	m   map[uint64]*Entry // by key hash; the key is compared on lookup
	pos slru
	neg slru
	st  Stats // counters of this shard, guarded by mu

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// Stats are cumulative counters and current sizes.
type Stats struct {
	Hits      [2]uint64 // by kind: [0] success, [1] denial (including SERVFAIL)
	Misses    uint64    // lookups with no fresh entry
	Evictions [2]uint64 // entries dropped for capacity, by kind
	Entries   [2]int    // entries now held, by kind
}

// Result describes a lookup.
type Result struct {
	Hit bool
	// Kind of the answer on a hit.
	Kind Kind
	// Rcode of the answer on a hit.
	Rcode int
	// Stale: the hit is an expired entry served during the failure recheck
	// interval set by RefreshFailed.
	Stale bool
	// Prefetch asks the caller to refresh the entry in the background; it
	// is set for one caller only until Set, PrefetchDone or PrefetchFailed
	// (and then not before RecheckInterval).
	Prefetch bool
}

// New returns a cache. now is the clock; nil uses time.Now through a coarse
// clock refreshed every 100ms, which Close stops.
func New(cfg Config, now func() time.Time) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ClusterDomain != "" {
		cfg.ClusterDomain = dns.Fqdn(cfg.ClusterDomain) // dns.IsSubDomain compares FQDNs
	}
	n := maxShards
	for n > 1 && cfg.Size/n < minShardSize {
		n /= 2
	}
	c := &Cache{
		cfg:    cfg,
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		nowFn:  now,
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[uint64]*Entry)
		s.pos.init(2 * ((cfg.Size + n - 1) / n))
		s.neg.init(2 * ((cfg.NegativeSize + n - 1) / n))
	}
	if now == nil {
		c.coarse.Store(time.Now().UnixNano())
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.tick()
	}
	return c, nil
}

func (c *Cache) tick() {
	defer close(c.done)
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.coarse.Store(now.UnixNano())
		}
	}
}

// Close stops the coarse clock, if any.
func (c *Cache) Close() {
	if c.stop != nil {
		close(c.stop)
		<-c.done
		c.stop = nil
	}
}

func (c *Cache) now() int64 {
	if c.nowFn != nil {
		return c.nowFn().UnixNano()
	}
	return c.coarse.Load()
}

// Capacity returns the largest number of positive and negative entries.
func (c *Cache) Capacity() (positive, negative int) {
	return c.cfg.Size, c.cfg.NegativeSize
}

func (c *Cache) shard(key []byte) (*shard, uint64) {
	h := maphash.Bytes(c.seed, key)
	return &c.shards[h&c.mask], h
}

// lookup returns the entry for key, or nil. Called with s.mu held.
func (s *shard) lookup(h uint64, key []byte) *Entry {
	e := s.m[h]
	if e == nil || !bytes.Equal(e.key(), key) {
		return nil
	}
	return e
}

// Get writes the fresh answer for q into dst[:0] and returns it with
// Result.Hit set (or, within RecheckInterval of a RefreshFailed, the stale
// answer with Result.Stale set too), or returns a miss. limit is the largest
// response the client accepts (see dnswire.Query.Limit). It does not
// allocate.
func (c *Cache) Get(dst []byte, q *dnswire.Query, limit int) ([]byte, Result) {
	key := q.Key()
	s, h := c.shard(key)
	now := c.now()
	s.mu.Lock()
	e := s.lookup(h, key)
	stale := false
	if e == nil || now >= e.expiry {
		// An expired entry whose refresh failed recently is served stale
		// without asking the backend again (RFC 8767 §5, failure recheck).
		if e != nil && e.refreshFailed(now) {
			stale = true
		} else {
			if e != nil && now >= e.staleT {
				c.drop(s, e)
			}
			s.st.Misses++
			s.mu.Unlock()
			return dst, Result{}
		}
	}
	res := c.hit(s, e, now, stale)
	s.st.Hits[min(int(e.kind), 1)]++
	s.mu.Unlock()
	return e.write(dst, q, age(now, e.stored), stale, limit), res
}

// hit moves e up its LRU, served stale or not, and says whether the caller
// is to prefetch it. Called with s.mu held; the caller counts the hit.
func (c *Cache) hit(s *shard, e *Entry, now int64, stale bool) Result {
	res := Result{Hit: true, Stale: stale, Kind: e.kind, Rcode: e.rcode()}
	if e.kind == Success {
		s.pos.hit(e)
	} else {
		s.neg.hit(e)
	}
	e.hits++
	// A refresh that failed is not tried again before the recheck time
	// (RFC 8767 §5), so a dead backend does not get one prefetch per hit.
	if !stale && c.cfg.PrefetchHits > 0 && e.kind != ServFail && !e.prefetching && now >= e.recheck &&
		e.hits >= uint32(c.cfg.PrefetchHits) && (e.expiry-now)*10 < int64(e.ttl)*int64(time.Second) {
		e.prefetching = true
		res.Prefetch = true
	}
	return res
}

// Below writes into dst[:0] an NXDOMAIN answer to q made from the fresh
// NXDOMAIN entry of cut, the key of a name above q's with q's type, class
// and flags: a name that does not exist has nothing under it (RFC 8020).
// The answer is the cut's records for q's question, TTLs aged, so it lasts
// no longer than the cut's entry; it is not stored. The hit is the cut's
// (Result.Prefetch asks for a refresh of cut). ok is false when cut has no
// such entry. The query was counted as a miss by Get, its own name having
// no entry; the cut's entry counts no hit. Like Get, it does not allocate.
func (c *Cache) Below(dst []byte, q *dnswire.Query, cut []byte, limit int) (resp []byte, res Result, ok bool) {
	s, h := c.shard(cut)
	now := c.now()
	s.mu.Lock()
	e := s.lookup(h, cut)
	if e == nil || !e.absent(now) {
		s.mu.Unlock()
		return dst, Result{}, false
	}
	res = c.hit(s, e, now, false)
	s.mu.Unlock()
	return e.writeBelow(dst, q, age(now, e.stored), limit), res, true
}

// Fresh reports whether key has an answer Get would serve without a miss,
// without counting a lookup or touching the entry's place in the LRU.
func (c *Cache) Fresh(key []byte) bool {
	return c.peek(key, func(e *Entry, now int64) bool { return now < e.expiry || e.refreshFailed(now) })
}

// Known reports whether key has an entry other than a SERVFAIL, fresh or
// expired within the serve-stale window: its name was asked and answered
// before. Like Fresh, it counts no lookup and leaves the LRU as it is.
func (c *Cache) Known(key []byte) bool {
	return c.peek(key, func(e *Entry, now int64) bool { return e.kind != ServFail && now < e.staleT })
}

// Absent reports whether key has an entry that says, fresh, that its name
// does not exist (Entry.absent), the entry Below denies names under. Like
// Fresh, it counts no lookup and leaves the LRU as it is.
func (c *Cache) Absent(key []byte) bool {
	return key != nil && c.peek(key, (*Entry).absent)
}

// absent reports whether e says at now that its name does not exist, nor
// any name under it (RFC 8020): a fresh NXDOMAIN without answer records.
// An NXDOMAIN after a CNAME chain denies the chain's last target, not the
// name asked (RFC 6604 §2.1), so it does not count.
func (e *Entry) absent(now int64) bool {
	return e.kind == Denial && now < e.expiry && e.rcode() == dns.RcodeNameError && e.answers() == 0
}

// peek reports whether key has an entry for which ok holds at now, under
// the shard's lock.
func (c *Cache) peek(key []byte, ok func(e *Entry, now int64) bool) bool {
	s, h := c.shard(key)
	now := c.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(h, key)
	return e != nil && ok(e, now)
}

// refreshFailed reports whether e, expired, is served stale without a miss
// at now: its refresh failed within RecheckInterval and it is still within
// the serve-stale window.
func (e *Entry) refreshFailed(now int64) bool { return now < e.recheck && now < e.staleT }

// GetStale writes the answer for q, fresh or expired up to the serve-stale
// window (TTLs capped at StaleTTL), into dst[:0], for when the backend
// fails (RFC 8767 §5). A cached SERVFAIL is never served stale.
func (c *Cache) GetStale(dst []byte, q *dnswire.Query, limit int) (resp []byte, stale, ok bool) {
	key := q.Key()
	s, h := c.shard(key)
	now := c.now()
	s.mu.Lock()
	e := s.lookup(h, key)
	if e == nil || e.kind == ServFail || now >= e.staleT {
		s.mu.Unlock()
		return dst, false, false
	}
	s.mu.Unlock()
	stale = now >= e.expiry
	return e.write(dst, q, age(now, e.stored), stale, limit), stale, true
}

// RecheckInterval is how long an expired entry is served stale by Get,
// without a miss, after a refresh failed: RFC 8767 §5 suggests 30 seconds
// for this failure recheck timer.
const RecheckInterval = 30 * time.Second

// RefreshFailed records that the backend could not refresh key: until
// RecheckInterval has passed, Get serves the entry stale (while it is
// within the serve-stale window) instead of reporting a miss, and asks for
// no prefetch of it.
func (c *Cache) RefreshFailed(key []byte) {
	s, h := c.shard(key)
	now := c.now()
	s.mu.Lock()
	if e := s.lookup(h, key); e != nil && e.kind != ServFail {
		e.recheck = now + int64(RecheckInterval)
	}
	s.mu.Unlock()
}

// PrefetchFailed ends the prefetch of key that Get asked for, which the
// backend failed: as after RefreshFailed, the entry is not prefetched again
// before RecheckInterval has passed (RFC 8767 §5), and is served stale
// once expired. An entry stored since the prefetch started is left alone.
func (c *Cache) PrefetchFailed(key []byte) {
	s, h := c.shard(key)
	now := c.now()
	s.mu.Lock()
	if e := s.lookup(h, key); e != nil && e.prefetching {
		e.prefetching = false
		e.recheck = now + int64(RecheckInterval)
	}
	s.mu.Unlock()
}

// PrefetchDone allows another prefetch of key at once, after one that ended
// without an answer through no fault of the backend (the resolver shutting
// down); after a failed one, call PrefetchFailed.
func (c *Cache) PrefetchDone(key []byte) {
	s, h := c.shard(key)
	s.mu.Lock()
	if e := s.lookup(h, key); e != nil {
		e.prefetching = false
	}
	s.mu.Unlock()
}

// Write appends to dst[:0] the answer in e (from Set) to q, aged by the time
// since e was built. q's key must be the one e was built for.
func (c *Cache) Write(dst []byte, e *Entry, q *dnswire.Query, limit int) []byte {
	return e.write(dst, q, age(c.now(), e.stored), false, limit)
}

func age(now, stored int64) uint32 {
	if now <= stored {
		return 0
	}
	return uint32((now - stored) / int64(time.Second))
}

// insert stores e, replacing the entry with the same key and keeping its
// segment, and evicting for capacity.
func (c *Cache) insert(e *Entry) {
	s := &c.shards[e.hash&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	seg := probation
	if old := s.m[e.hash]; old != nil {
		if old.kind.negative() == e.kind.negative() {
			seg = old.seg
		}
		c.drop(s, old)
	}
	l, k, limit := &s.pos, 0, int64(c.cfg.Size)
	if e.kind.negative() {
		l, k, limit = &s.neg, 1, int64(c.cfg.NegativeSize)
	}
	if l.cap == 0 {
		return
	}
	s.m[e.hash] = e
	l.add(e, seg)
	n := c.count[k].Add(1)
	if n > limit || l.len() > l.cap {
		v := l.victim(e)
		if v == nil {
			// Over the cache's limit with nothing else in this shard:
			// e is not kept, so that the limit holds.
			v = e
		}
		c.drop(s, v)
		s.st.Evictions[k]++
	}
}

// drop removes e. Called with s.mu held.
func (c *Cache) drop(s *shard, e *Entry) {
	k := 0
	if e.kind.negative() {
		s.neg.remove(e)
		k = 1
	} else {
		s.pos.remove(e)
	}
	delete(s.m, e.hash)
	c.count[k].Add(-1)
}

// Len returns the number of positive and negative entries.
func (c *Cache) Len() (positive, negative int) {
	st := c.Stats()
	return st.Entries[0], st.Entries[1]
}

// Stats sums the shards' counters.
func (c *Cache) Stats() Stats {
	var t Stats
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k := range 2 {
			t.Hits[k] += s.st.Hits[k]
			t.Evictions[k] += s.st.Evictions[k]
		}
		t.Misses += s.st.Misses
		t.Entries[0] += s.pos.len()
		t.Entries[1] += s.neg.len()
		s.mu.Unlock()
	}
	return t
}
