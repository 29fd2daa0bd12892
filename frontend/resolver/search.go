package resolver

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// Search-path prefetch.
//
// A pod's resolv.conf from kubelet has "search NS.svc.DOMAIN svc.DOMAIN
// DOMAIN" and ndots:5, so a name with fewer than five dots is tried in each
// search domain in turn before it is tried as it is, each try waiting for
// the NXDOMAIN of the one before: a name that is not a Service, say an
// external name or one that does not exist, costs four round trips. When
// such a try misses the cache, its answer comes from the backend, and the
// pod's next tries will too. So a miss of NAME.NS.svc.DOMAIN also starts
// the exchanges of NAME.svc.DOMAIN and NAME.DOMAIN (same type, class and
// DO and CD bits), in the background, as a prefetch, and once all three
// are denied, that of NAME itself, which the pod asks next: the pod's next
// tries find them cached, or join them while they run, and its lookup
// waits for about one round trip to the backend and one upstream instead
// of three and one after them. Each answer is the backend's own for the
// name asked, stored and served as any other; only the time it is asked
// changes.
//
// A name that pods asked as it is before, whose entry is still in the
// cache but expired (within the serve-stale window), has its exchange
// started at once with the other two: the search path denied it last time,
// and waiting for the three denials again would put its upstream round
// trip after the backend's one. An external name that pods look up now and
// then, with its entries expired in between, then costs one round trip
// instead of two.
//
// A name never asked before, a random one say, under a last label L whose
// three cuts L.NS.svc.DOMAIN, L.svc.DOMAIN and L.DOMAIN are cached
// NXDOMAIN, has its exchange started at once too: its three tries lie
// under those names, and a name that does not exist has nothing under it
// (RFC 8020, which the kubernetes plugin keeps: a namespace, or the
// svc.DOMAIN above every one, is NODATA, not NXDOMAIN), so the pod is sure
// to ask it. The cuts are fetched after a walk under L has been denied,
// when not cached: three small lookups per last label (com, net, io …) and
// negative TTL. Search-path prefetch changes only when to ask, never what
// is answered; with Config.DenyBelowNXDOMAIN the cuts also answer the
// tries under them (deniedBelow), and the backend is asked none of them.
//
// What it costs: two more lookups in the backend's own zone (the kubernetes
// plugin answers them from memory, nothing goes upstream), and two more
// cache entries, usually negative, when the pod's first try was the answer;
// after a walk denied, up to three more for the cuts.
// Nothing goes upstream that the pod would not ask, but for a name asked
// upstream before that has since become a name of the cluster.
// To keep that rare, a NAME of one label, the usual short Service name
// whose first try is the answer, starts nothing. And it never adds load to
// a busy backend: it starts nothing while searchPrefetchBelow exchanges or
// more are running, so a flood of misses, whatever their names, gets no
// more exchanges than it asked for.

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

// Indices of the keys searchPath.next returns.
const (
	trySvc    = iota // NAME.svc.DOMAIN, the pod's second try
	tryDomain        // NAME.DOMAIN, its third
	tryName          // NAME, asked as it is last
	cutNS            // L.NS.svc.DOMAIN, L being NAME's last label
	cutSvc           // L.svc.DOMAIN
	cutDomain        // L.DOMAIN
	searchKeys
)

// next writes into dst the cache keys of the three tries a pod makes after
// key when key's name is NAME.NS.svc.DOMAIN with a NAME of two labels or
// more, and those of the three names above the tries (the cuts, below),
// and returns them, indexed by trySvc … cutDomain; ok is false for any
// other key, and for a nil searchPath (prefetch off). dst's arrays are the
// caller's, so that a miss allocates nothing here.
//
// Each of the pod's three tries lies under one cut: NAME.NS.svc.DOMAIN
// under L.NS.svc.DOMAIN, NAME.svc.DOMAIN under L.svc.DOMAIN, NAME.DOMAIN
// under L.DOMAIN. A name that does not exist has nothing under it (RFC
// 8020), so when the three cuts are NXDOMAIN, so are the three tries.
func (s *searchPath) next(key []byte, dst *[searchKeys][dnswire.MaxKeyLen]byte) (keys [searchKeys][]byte, ok bool) {
	if s == nil {
		return keys, false
	}
	name := dnswire.KeyName(key)
	tail := key[len(name):] // type, class, flags
	head, ok := bytes.CutSuffix(name, s.svc)
	if !ok {
		return keys, false
	}
	// head is NAME's labels then NS's, in wire form.
	labels, prev, last := 0, -1, -1
	for off := 0; off < len(head); off += 1 + int(head[off]) {
		labels, prev, last = labels+1, last, off
	}
	if labels < 3 { // NS and a NAME of at least two labels
		return keys, false
	}
	nameLabels, l := head[:last], head[prev:last]
	for i, parts := range [searchKeys][3][]byte{
		trySvc:    {nameLabels, s.svc},
		tryDomain: {nameLabels, s.domain},
		tryName:   {nameLabels, []byte{0}},
		cutNS:     {head[prev:], s.svc},
		cutSvc:    {l, s.svc},
		cutDomain: {l, s.domain},
	} {
		k := dst[i][:0]
		for _, p := range parts {
			k = append(k, p...)
		}
		keys[i] = append(k, tail...)
	}
	return keys, true
}

// Levels of the names above a name of the cluster domain at which the
// kubernetes plugin keeps RFC 8020: when one is NXDOMAIN, so is every name
// under it. Indices of the keys searchPath.above returns.
const (
	aboveService   = iota // SVC.NS.svc.DOMAIN: no such Service, so no endpoint, port or pod hostname under it
	aboveNamespace        // NS.svc.DOMAIN: no such namespace (an existing one is NODATA)
	aboveDomain           // L.DOMAIN, L neither svc nor pod: not a name of the plugin at all
	aboveKeys
)

// above writes into dst the cache keys, with key's type, class and flags, of
// the names above key's name at the three levels where an NXDOMAIN from the
// kubernetes plugin holds for every name under it, and returns them indexed
// by aboveService … aboveDomain, nil where key's name has no such name
// above it. Below a Service the plugin does not keep RFC 8020
// (_tcp.web.NS.svc.DOMAIN is NXDOMAIN, _http._tcp.web.NS.svc.DOMAIN an SRV
// record), so no deeper name is returned. All are nil for a name outside
// the cluster domain and for a nil searchPath.
func (s *searchPath) above(key []byte, dst *[aboveKeys][dnswire.MaxKeyLen]byte) (keys [aboveKeys][]byte) {
	if s == nil {
		return keys
	}
	name := dnswire.KeyName(key)
	tail := key[len(name):]
	head, ok := bytes.CutSuffix(name, s.domain)
	if !ok || len(head) == 0 {
		return keys
	}
	// The offsets of head's last three labels, the one next to DOMAIN in
	// off[0].
	var off [3]int
	n := 0
	for o := 0; o < len(head); o += 1 + int(head[o]) {
		off[2], off[1], off[0] = off[1], off[0], o
		n++
		if o+1+int(head[o]) > len(head) {
			return keys // DOMAIN's wire form matched inside a label
		}
	}
	at := func(i int, from int) []byte {
		k := append(dst[i][:0], head[from:]...)
		k = append(k, s.domain...)
		return append(k, tail...)
	}
	switch last := string(head[off[0]:]); {
	case n < 2:
	case last == "\x03svc":
		if n >= 3 {
			keys[aboveNamespace] = at(aboveNamespace, off[1])
		}
		if n >= 4 {
			keys[aboveService] = at(aboveService, off[2])
		}
	case last != "\x03pod":
		keys[aboveDomain] = at(aboveDomain, off[0])
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
// running, or to be denied from their cuts too. Each runs as a flight of its own in the background,
// which the pod's query of the name joins (join) and whose answer is
// stored (fly). Once the three tries are all denied (NXDOMAIN or NODATA),
// the pod asks the name as it is next, and that exchange starts too: it is
// the only one of a name outside the cluster that goes upstream, so it is
// not started before the pod would ask it, unless the name was asked as it
// is before (Cache.Known) or the three cuts are cached NXDOMAIN
// (Cache.Absent), so that the tries are too: then it starts at once. After
// such a walk, the cuts not cached are fetched, for the next name under
// the same last label (a lookup of api.example.com makes that of
// www.example.com start www.example.com at once).
func (r *Resolver) searchPrefetch(key []byte, first *flight) {
	var buf [searchKeys][dnswire.MaxKeyLen]byte
	keys, ok := r.search.next(key, &buf)
	if !ok {
		return
	}
	cut := r.cache.Absent(keys[cutNS]) && r.cache.Absent(keys[cutSvc]) && r.cache.Absent(keys[cutDomain])
	if cut || r.cache.Known(keys[tryName]) {
		r.prefetchKey(keys[tryName])
	}
	if cut && r.below {
		return // the pod's next tries are denied from the cuts (deniedBelow)
	}
	second, third := r.prefetchKey(keys[trySvc]), r.prefetchKey(keys[tryDomain])
	if second == nil || third == nil {
		return
	}
	waits := []*flight{second, third}
	if first != nil {
		waits = append(waits, first)
	}
	later := [][]byte{bytes.Clone(keys[tryName])}
	if !cut {
		for _, k := range keys[cutNS:] {
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
// f in r.flights; it unlocks r.mu.
func (r *Resolver) detach(f *flight, timeout time.Duration) {
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		ctx := r.ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		r.fly(ctx, f)
	}()
}
