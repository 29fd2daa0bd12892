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
// What it costs: two more lookups in the backend's own zone (the kubernetes
// plugin answers them from memory, nothing goes upstream), and two more
// cache entries, usually negative, when the pod's first try was the answer.
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

// next writes into dst the cache keys of the three tries a pod makes after
// key when key's name is NAME.NS.svc.DOMAIN with a NAME of two labels or
// more, NAME.svc.DOMAIN, NAME.DOMAIN and NAME, and returns them, or nil.
// dst's arrays are the caller's, so that a miss allocates nothing here.
// A nil searchPath (prefetch off) returns nil.
func (s *searchPath) next(key []byte, dst *[3][dnswire.MaxKeyLen]byte) [][]byte {
	if s == nil {
		return nil
	}
	name := dnswire.KeyName(key)
	tail := key[len(name):] // type, class, flags
	head, ok := bytes.CutSuffix(name, s.svc)
	if !ok {
		return nil
	}
	// head is NAME's labels then NS's, in wire form.
	labels, last := 0, -1
	for off := 0; off < len(head); off += 1 + int(head[off]) {
		labels, last = labels+1, off
	}
	if labels < 3 { // NS and a NAME of at least two labels
		return nil
	}
	nameLabels := head[:last]
	return [][]byte{
		append(append(append(dst[0][:0], nameLabels...), s.svc...), tail...),
		append(append(append(dst[1][:0], nameLabels...), s.domain...), tail...),
		append(append(append(dst[2][:0], nameLabels...), 0), tail...),
	}
}

// searchPrefetch starts the exchanges of the pod's next two tries after a
// miss of key whose exchange is first (searchPath.next), unless they are
// cached or running. Each runs as a flight of its own in the background,
// which the pod's query of the name joins (join) and whose answer is
// stored (fly). Once the three tries are all denied (NXDOMAIN or NODATA),
// the pod asks the name as it is next, and that exchange starts too: it is
// the only one of a name outside the cluster that goes upstream, so it is
// not started before the pod would ask it, unless the name was asked as it
// is before (Cache.Known): then it starts at once.
func (r *Resolver) searchPrefetch(key []byte, first *flight) {
	var buf [3][dnswire.MaxKeyLen]byte
	keys := r.search.next(key, &buf)
	if keys == nil {
		return
	}
	if r.cache.Known(keys[2]) {
		r.prefetchKey(keys[2])
	}
	second, third := r.prefetchKey(keys[0]), r.prefetchKey(keys[1])
	if second == nil || third == nil {
		return
	}
	name := bytes.Clone(keys[2])
	r.background(func() {
		for _, f := range []*flight{first, second, third} {
			select {
			case <-f.done:
			case <-r.ctx.Done():
				return
			}
			if !denied(f.resp) {
				return
			}
		}
		r.prefetchKey(name)
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
