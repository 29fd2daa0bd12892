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
// pod's next two tries will too. So a miss of NAME.NS.svc.DOMAIN also starts
// the exchanges of NAME.svc.DOMAIN and NAME.DOMAIN (same type, class and
// DO and CD bits), in the background, as a prefetch: the pod's next tries
// find them cached, or join them while they run, and its lookup waits for
// about one backend round trip instead of three. Each answer is the
// backend's own for the name asked, stored and served as any other; only
// the time it is asked changes.
//
// What it costs: two more lookups in the backend's own zone (the kubernetes
// plugin answers them from memory, nothing goes upstream), and two more
// cache entries, usually negative, when the pod's first try was the answer.
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

// next writes into dst the cache keys of the two tries a pod makes after
// key when key's name is NAME.NS.svc.DOMAIN with a NAME of two labels or
// more, and returns how many it wrote (0 or 2). dst's arrays are the
// caller's, so that a miss allocates nothing here.
func (s *searchPath) next(key []byte, dst *[2][dnswire.MaxKeyLen]byte) [][]byte {
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
	k2 := append(append(append(dst[0][:0], nameLabels...), s.svc...), tail...)
	k3 := append(append(append(dst[1][:0], nameLabels...), s.domain...), tail...)
	return [][]byte{k2, k3}
}

// searchPrefetch starts the exchanges of the pod's next tries after a miss
// of key (searchPath.next) that are neither cached nor running. Each runs
// as a flight of its own in the background, which the pod's next query of
// the name joins (join) and whose answer is stored (fly).
func (r *Resolver) searchPrefetch(key []byte) {
	var buf [2][dnswire.MaxKeyLen]byte
	for _, k := range r.search.next(key, &buf) {
		if r.cache.Fresh(k) {
			continue
		}
		r.mu.Lock()
		if r.closed || len(r.flights) >= searchPrefetchBelow {
			r.mu.Unlock()
			return
		}
		if r.flights[string(k)] != nil {
			r.mu.Unlock()
			continue
		}
		f := newFlight(k)
		r.flights[string(f.key)] = f
		r.m.searchPrefetch.Inc()
		r.detach(f, prefetchTimeout)
	}
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
