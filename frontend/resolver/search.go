package resolver

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// Search-path prefetch.
//
// A pod's resolv.conf from kubelet has "search NS.svc.DOMAIN svc.DOMAIN
// DOMAIN" and ndots:5, so a name with fewer than five dots is tried in each
// search domain in turn before it is tried as it is, each try waiting for
// the NXDOMAIN of the one before. So a miss of NAME.NS.svc.DOMAIN also
// starts the exchanges of NAME.svc.DOMAIN and NAME.DOMAIN (same type, class
// and DO and CD bits), in the background: the pod's next tries find them
// cached, or join them while they run. Each answer is the backend's own for
// the name asked, stored and served as any other; only the time it is
// asked changes.
//
// Only names of the cluster domain are asked so. The kubernetes plugin
// answers them from memory, and nothing of them goes upstream (a Corefile
// that forwards part of the cluster domain elsewhere turns this off: the
// chart passes --search-prefetch=false then). A name outside the cluster
// domain is asked only when a client asks it, or asked it before (its
// entry is known to the cache, Cache.Known): then NAME is started with the
// tries, since the search path denied it last time and its upstream round
// trip would otherwise wait for the three denials. It is never guessed: a
// miss of NAME.NS.svc.DOMAIN with a NAME of two labels has five dots, so it
// may be a pod's first try of NAME, but it may just as well be a name asked
// as it is (glibc and musl ask a name of five dots as it is first, musl
// only as it is), whose client never asks NAME: pod-0.db.NS.svc.DOMAIN of
// a StatefulSet, or _http._tcp.web.NS.svc.DOMAIN. Sending NAME upstream
// then would send out a name no pod asked.
//
// With Config.DenyBelowNXDOMAIN, the tries are answered from the names
// above them instead when those are cached NXDOMAIN (deniedBelow), and the
// backend is asked none of them. After a walk whose tries were all denied,
// the names above the tries (searchPath.above of each, the "cuts": for
// x.example.net they are net.NS.svc.DOMAIN, net.svc.DOMAIN and
// net.DOMAIN) are fetched when not cached, so that the next walk under the
// same last label (com, net, io ...) is denied from the cache. They are
// names of the cluster domain too, and their denials are kept at most
// --cluster-negative-max-ttl (cache.Config.ClusterNegativeMaxTTL, 5s), so
// a Service, namespace or endpoint created under a cut is found within
// that time even by a name never asked before.
//
// What it costs: two more lookups in the backend's own zone, and two more
// cache entries, usually negative, when the pod's first try was the answer;
// after a walk denied, up to three more for the cuts. To keep that rare, a
// NAME of one label, the usual short Service name whose first try is the
// answer, starts nothing. And it never adds load to a busy backend: it
// starts nothing while searchPrefetchBelow exchanges or more are running,
// so a flood of misses, whatever their names, gets no more exchanges than
// it asked for.

// searchPrefetchBelow is the number of running exchanges (flights) at or
// above which a miss starts no search-path prefetch.
const searchPrefetchBelow = 32

// searchPath holds the wire forms of a cluster domain's suffixes, lower
// case, root label included.
type searchPath struct {
	domain []byte // DOMAIN
	svc    []byte // svc.DOMAIN
}

// newSearchPath returns the search path of a cluster domain ("cluster.local"),
// or nil for "" (search-path prefetch off).
func newSearchPath(domain string) (*searchPath, error) {
	if domain == "" {
		return nil, nil
	}
	fqdn := dns.Fqdn(strings.ToLower(domain))
	if _, ok := dns.IsDomainName(fqdn); !ok || fqdn == "." {
		return nil, fmt.Errorf("cluster domain %q: not a domain name", domain)
	}
	wire := make([]byte, dnswire.MaxNameLen)
	n, err := dns.PackDomainName(fqdn, wire, 0, nil, false)
	if err != nil {
		return nil, fmt.Errorf("cluster domain %q: %w", domain, err)
	}
	wire = wire[:n]
	return &searchPath{domain: wire, svc: append([]byte("\x03svc"), wire...)}, nil
}

// clusterName is a cache key's name read against the cluster domain: the
// one walk over its labels that both searchPath.next and searchPath.above
// read.
type clusterName struct {
	head []byte // the labels left of DOMAIN, wire form; nil: not under DOMAIN
	tail []byte // the key's type, class and flags
	n    int    // labels in head
	// off[i] is the offset in head of its (i+1)th label from the right:
	// off[0] the one next to DOMAIN. Valid for i < min(n, len(off)).
	off [4]int
}

// parse walks key's name; head is nil for a name outside the cluster
// domain (or DOMAIN itself), and for a nil searchPath.
func (s *searchPath) parse(key []byte) (c clusterName) {
	if s == nil {
		return c
	}
	name := dnswire.KeyName(key)
	c.tail = key[len(name):]
	head, ok := bytes.CutSuffix(name, s.domain)
	if !ok || len(head) == 0 {
		return c
	}
	for o := 0; o < len(head); o += 1 + int(head[o]) {
		if head[o] == 0 || o+1+int(head[o]) > len(head) {
			return c // DOMAIN's wire form matched inside a label
		}
		copy(c.off[1:], c.off[:len(c.off)-1])
		c.off[0] = o
		c.n++
	}
	c.head = head
	return c
}

// last returns the label next to DOMAIN, with its length byte ("\x03svc").
func (c *clusterName) last() string { return string(c.head[c.off[0]:]) }

// key writes into dst the cache key of head[from:to] followed by suffix
// and c's tail.
func (c *clusterName) key(dst *[dnswire.MaxKeyLen]byte, from, to int, suffix []byte) []byte {
	k := append(dst[:0], c.head[from:to]...)
	k = append(k, suffix...)
	return append(k, c.tail...)
}

// Indices of the keys searchPath.next returns.
const (
	trySvc    = iota // NAME.svc.DOMAIN, the pod's second try
	tryDomain        // NAME.DOMAIN, its third
	tryName          // NAME, asked as it is last
	searchKeys
)

// next writes into dst the cache keys of the three tries a pod makes after
// key when key's name is NAME.NS.svc.DOMAIN with a NAME of two labels or
// more, and returns them, indexed by trySvc … tryName; ok is false for any
// other key, and for a nil searchPath. dst's arrays are the caller's, so
// that a miss allocates nothing here.
func (s *searchPath) next(key []byte, dst *[searchKeys][dnswire.MaxKeyLen]byte) (keys [searchKeys][]byte, ok bool) {
	c := s.parse(key)
	if c.head == nil || c.n < 4 || c.last() != "\x03svc" { // NAME (2+), NS, svc
		return keys, false
	}
	name := c.off[1] // NAME is head[:name]
	keys[trySvc] = c.key(&dst[trySvc], 0, name, s.svc)
	keys[tryDomain] = c.key(&dst[tryDomain], 0, name, s.domain)
	keys[tryName] = c.key(&dst[tryName], 0, name, []byte{0})
	return keys, true
}

// Levels of the names above a name of the cluster domain at which the
// kubernetes plugin keeps RFC 8020: when one is NXDOMAIN, so is every name
// under it. Indices of the keys searchPath.above returns.
const (
	aboveService   = iota // SVC.NS.svc.DOMAIN: no such Service, so no endpoint, port or pod hostname under it
	aboveNamespace        // NS.svc.DOMAIN: no such namespace (an existing one is NODATA)
	aboveDomain           // L.DOMAIN, L none of the plugin's own labels (notDeniedBelow)
	aboveKeys
)

// Where an NXDOMAIN of the kubernetes plugin (CoreDNS v1.15
// plugin/kubernetes) denies the names under it. The plugin answers a name
// from its tree of objects (namespaces, Services, endpoints), and an
// NXDOMAIN at one of the levels above says no object is there, so none is
// under it either. It also answers some names by rules that bypass the
// tree; where such a rule answers, nothing above says anything:
//   - svc.DOMAIN and pod.DOMAIN hold the namespaces (notDeniedBelow): no
//     level of the domain there.
//   - Every name that begins with ns.dns.DOMAIN (ns.dns.DOMAIN itself, and
//     ns.dns.DOMAIN.x.NS.svc.DOMAIN alike) is answered by the plugin's
//     name-server rule, A or AAAA records or NODATA, whatever is above it:
//     the plugin tests where DOMAIN first occurs in the name
//     (isDefaultNS). No cut denies such a name (nameServerRule).
//   - TXT is answered NXDOMAIN for every name without records of another
//     type, an existing namespace included, while the Services under it
//     are NODATA: for TXT a namespace's NXDOMAIN is no cut (levelHolds).
//     At the Service and domain levels a name without records has nothing
//     under it, so TXT's NXDOMAIN holds there.
// The differential suite (difftest/) checks each against the plugin.

// notDeniedBelow are the labels next to DOMAIN whose subtree the plugin
// answers by namespace: svc and pod.
var notDeniedBelow = map[string]bool{"\x03svc": true, "\x03pod": true}

// levelHolds reports whether the plugin's NXDOMAIN for qtype at level
// denies the names under it.
func levelHolds(level int, qtype uint16) bool {
	return level != aboveNamespace || qtype != dns.TypeTXT
}

// nameServerRule reports whether the plugin answers head.DOMAIN by its
// name-server rule: head is ns.dns, or begins with ns.dns.DOMAIN.
func (s *searchPath) nameServerRule(head []byte) bool {
	const nsdns = "\x02ns\x03dns"
	rest, ok := bytes.CutPrefix(head, []byte(nsdns))
	return ok && (len(rest) == 0 || bytes.HasPrefix(rest, s.domain[:len(s.domain)-1]))
}

// above writes into dst the cache keys, with key's type, class and flags, of
// the names above key's name at the three levels where an NXDOMAIN from the
// kubernetes plugin holds for every name under it, and returns them indexed
// by aboveService … aboveDomain, nil where key's name has no such name
// above it, or where the plugin's NXDOMAIN there does not deny key's name
// (levelHolds, nameServerRule). Below a Service the plugin does not keep
// RFC 8020 (_tcp.web.NS.svc.DOMAIN is NXDOMAIN, _http._tcp.web.NS.svc.DOMAIN
// an SRV record), so no deeper name is returned. All are nil for a name
// outside the cluster domain and for a nil searchPath.
func (s *searchPath) above(key []byte, dst *[aboveKeys][dnswire.MaxKeyLen]byte) (keys [aboveKeys][]byte) {
	c := s.parse(key)
	if c.head == nil || c.n < 2 || s.nameServerRule(c.head) {
		return keys
	}
	qtype, _, _ := dnswire.KeyQuestion(key)
	switch {
	case c.last() == "\x03svc":
		if c.n >= 3 && levelHolds(aboveNamespace, qtype) {
			keys[aboveNamespace] = c.key(&dst[aboveNamespace], c.off[1], len(c.head), s.domain)
		}
		if c.n >= 4 && levelHolds(aboveService, qtype) {
			keys[aboveService] = c.key(&dst[aboveService], c.off[2], len(c.head), s.domain)
		}
	case !notDeniedBelow[c.last()] && levelHolds(aboveDomain, qtype):
		keys[aboveDomain] = c.key(&dst[aboveDomain], c.off[0], len(c.head), s.domain)
	}
	return keys
}

// deniedBelow writes into dst[:0] an NXDOMAIN answer to q when a name above
// q's (searchPath.above) is cached NXDOMAIN, and refreshes that name's
// entry when it is about to expire and has been used, as for any hit. A
// pod's first try denied so, from the Service level, starts the prefetch of
// the tries after it (searchPrefetch): the name as it is, which the pod asks
// once its other tries are denied too, starts at once.
func (r *Resolver) deniedBelow(dst []byte, q *dnswire.Query, limit int) ([]byte, bool) {
	var buf [aboveKeys][dnswire.MaxKeyLen]byte
	key := q.Key()
	for i, cut := range r.search.above(key, &buf) {
		if cut == nil {
			continue
		}
		out, res, ok := r.cache.Below(dst, q, cut, limit)
		if !ok {
			continue
		}
		r.m.deniedBelow.Inc()
		if res.Prefetch {
			r.prefetch(cut)
		}
		if i == aboveService {
			r.searchPrefetch(key, nil)
		}
		return out, true
	}
	return nil, false
}

// searchPrefetch starts the exchanges of the pod's next two tries after a
// miss of key whose exchange is first (searchPath.next), or after key was
// denied from a cut (deniedBelow, first nil), unless they are cached,
// running, or to be denied from their cuts. Each runs as a flight of its
// own in the background, which the pod's query of the name joins (join)
// and whose answer is stored (fly). The name as it is, outside the cluster
// domain, starts only when it was asked before (Cache.Known). With denial
// below, once the tries are all denied (NXDOMAIN or NODATA), the cuts not
// cached are fetched, for the next name under the same last label (a
// lookup of api.example.com makes that of www.example.com denied in the
// cluster domain from the cache).
func (r *Resolver) searchPrefetch(key []byte, first *flight) {
	if !r.searchPrefetchOn {
		return
	}
	var buf [searchKeys][dnswire.MaxKeyLen]byte
	keys, ok := r.search.next(key, &buf)
	if !ok {
		return
	}
	if r.cache.Known(keys[tryName]) {
		r.prefetchKey(keys[tryName])
	}
	// The cuts of the pod's three tries, one level each (searchPath.above).
	var cuts [3][]byte
	var cutBuf [3][aboveKeys][dnswire.MaxKeyLen]byte
	for i, at := range [3]struct {
		key   []byte
		level int
	}{{key, aboveService}, {keys[trySvc], aboveNamespace}, {keys[tryDomain], aboveDomain}} {
		cuts[i] = r.search.above(at.key, &cutBuf[i])[at.level]
	}
	if r.below && r.cache.Absent(cuts[0]) && r.cache.Absent(cuts[1]) && r.cache.Absent(cuts[2]) {
		return // the pod's next tries are denied from the cuts (deniedBelow)
	}
	second, third := r.prefetchKey(keys[trySvc]), r.prefetchKey(keys[tryDomain])
	if second == nil || third == nil || !r.below {
		return
	}
	waits := []*flight{second, third}
	if first != nil {
		waits = append(waits, first)
	}
	var later [][]byte
	for _, k := range cuts {
		if k != nil {
			later = append(later, bytes.Clone(k))
		}
	}
	r.background(func() {
		for _, f := range waits {
			select {
			case <-f.done:
			case <-r.ctx.Done():
				return
			}
			if !denied(f.resp) {
				return
			}
		}
		for _, k := range later {
			r.prefetchKey(k)
		}
	})
}

// denied reports whether m says the name has no record of the type asked
// (NXDOMAIN or NODATA), upon which a stub resolver goes on to the next
// name of its search list.
func denied(m *dns.Msg) bool {
	return m != nil && (m.Rcode == dns.RcodeNameError || m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0)
}

// prefetchKey starts a background flight for key and returns it, or
// returns nil when key is cached or running, or searchPrefetchBelow
// flights or more are running.
func (r *Resolver) prefetchKey(key []byte) *flight {
	if r.cache.Fresh(key) {
		return nil
	}
	r.mu.Lock()
	if r.closed || len(r.flights) >= searchPrefetchBelow || r.flights[string(key)] != nil {
		r.mu.Unlock()
		return nil
	}
	f := newFlight(key)
	r.flights[string(f.key)] = f
	r.m.searchPrefetch.Inc()
	r.detach(f, prefetchTimeout)
	return f
}

// detach runs f's exchange in a goroutine of its own on the resolver's
// context, bounded by timeout when it is not 0. Called with r.mu held and
// f in r.flights; it unlocks r.mu. A panic in the exchange is logged and
// ends the flight with errNoFlight (its waiters answer SERVFAIL or stale
// data): no server recovers it in this goroutine, and it must not end the
// process.
func (r *Resolver) detach(f *flight, timeout time.Duration) {
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("exchange panic; its waiters get SERVFAIL", zap.Any("panic", p), zap.Stack("stack"))
			}
		}()
		ctx := r.ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		r.fly(ctx, f)
	}()
}
