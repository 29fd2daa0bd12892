package server

import (
	"hash/maphash"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/net/publicsuffix"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// Per-domain shares.
//
// What makes a miss slow is the domain asked, not the client asking: a
// domain whose servers hang keeps every miss under it in flight for the
// backend's whole forward timeout (about 6s), whoever sent it. Shares by
// client address alone let one client that floods such names take its
// whole share, and where many clients stand behind one address (the node
// IP and loopback: hostNetwork pods, kubelet, node processes) the
// ordinary misses of all of them are refused with it. Misses in flight
// are therefore also bounded per domain (Config.MaxInflightPerDomain), as
// unbound and CoreDNS's forward bound theirs per upstream or per zone:
// a slow domain holds at most its share, and every other domain asked
// from the same address goes on being resolved.
//
// A domain is the registrable domain of the name (the public suffix plus
// one label, golang.org/x/net/publicsuffix): the owner's zone, which its
// owner's servers answer, in one step and without asking the backend for
// zone cuts. Names under Config.ClusterDomain are grouped by namespace
// (NAME.NS.svc.DOMAIN and NAME.NS.pod.DOMAIN count as NS.svc.DOMAIN and
// NS.pod.DOMAIN), and any other name there by its label under DOMAIN: the
// backend answers them from the API server, and a Corefile that forwards
// part of the cluster domain (a stub domain) forwards whole namespaces or
// labels under it, so one such namespace's slow servers hold its share
// alone. A pod's search-path tries of an external name (NAME.NS.svc.DOMAIN)
// count in the pod's namespace, where they are denied from memory.

// domKey identifies a miss's question and its domain in the per-domain
// table: hashes of the domain's lowercased name and of the question
// (name and type; collisions only merge two shares). The zero key means
// no domain (the question did not parse): such a miss has no domain
// share.
type domKey struct{ dom, q uint64 }

// domainTable counts, per domain, the distinct questions in flight, and
// per question the misses that ask it. Only misses touch it. A share
// counts distinct questions, not misses: misses of one question share
// one backend exchange (the resolver and the upstream pool coalesce
// them), so the backlog a restart leaves, many pods asking the same few
// names, costs the backend little, while a flood of new names under a
// slow domain holds one exchange each. Entries exist only while a miss
// is in flight, so neither map holds more than MaxInflight entries.
type domainTable struct {
	seed   maphash.Seed
	shards [srcShards]domShard
	// names holds *[dnswire.MaxNameLen]byte buffers for the question's
	// text: publicsuffix keeps its argument reachable from its result, so
	// a buffer on the stack would move to the heap on every miss.
	names sync.Pool
}

type domShard struct {
	mu        sync.Mutex       // guards the maps
	questions map[uint64]int32 // distinct questions in flight per domain, non-zero only
	misses    map[domKey]int32 // misses in flight per question, non-zero only
	_         [64 - 8 - 16]byte
}

func newDomainTable() *domainTable {
	t := &domainTable{seed: maphash.MakeSeed()}
	t.names.New = func() any { return new([dnswire.MaxNameLen]byte) }
	return t
}

func (t *domainTable) shard(k domKey) *domShard { return &t.shards[k.dom>>58] }

// take adds a miss of k unless its question is new and its domain already
// has limit distinct questions in flight; false means the domain is at
// its share. A miss whose question is already in flight is always taken:
// it adds no exchange. The zero key always succeeds.
func (t *domainTable) take(k domKey, limit int) bool {
	if k == (domKey{}) {
		return true
	}
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.misses == nil {
		sh.misses, sh.questions = make(map[domKey]int32), make(map[uint64]int32)
	}
	if n := sh.misses[k]; n > 0 {
		sh.misses[k] = n + 1
		return true
	}
	d := sh.questions[k.dom]
	if int(d) >= limit {
		return false
	}
	sh.questions[k.dom] = d + 1
	sh.misses[k] = 1
	return true
}

// give returns a miss taken for k.
func (t *domainTable) give(k domKey) {
	if k == (domKey{}) {
		return
	}
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch n := sh.misses[k]; {
	case n > 1:
		sh.misses[k] = n - 1
		return
	case n < 1:
		return
	}
	delete(sh.misses, k)
	if d := sh.questions[k.dom]; d > 1 {
		sh.questions[k.dom] = d - 1
	} else {
		delete(sh.questions, k.dom)
	}
}

// held returns the distinct questions in flight under k's domain, for
// tests.
func (t *domainTable) held(k domKey) int {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return int(sh.questions[k.dom])
}

// key returns the key of req's question, its domain grouped as described
// above, with cluster the cluster domain in lowercase without the final
// dot ("" for none), and whether the name is in the cluster domain. It
// allocates once (publicsuffix's failed parse of the name as an IP
// address), and only misses call it.
func (t *domainTable) key(req []byte, cluster string) (domKey, bool) {
	buf := t.names.Get().(*[dnswire.MaxNameLen]byte)
	defer t.names.Put(buf)
	name, end, ok := questionText(buf, req)
	if !ok {
		return domKey{}, false
	}
	inCluster := cluster != "" && (name == cluster || strings.HasSuffix(name, cluster) && strings.HasSuffix(name[:len(name)-len(cluster)], "."))
	k := domKey{dom: maphash.String(t.seed, domainOf(name, cluster)), q: maphash.String(t.seed, name)}
	if end+2 <= len(req) {
		// The type: A and AAAA of a name are two exchanges.
		k.q ^= uint64(req[end])<<8 | uint64(req[end+1])
	}
	if k.dom == 0 {
		k.dom = 1
	}
	return k, inCluster
}

// questionText writes the first question's name of req into buf as
// lowercase dotted text without the final dot ("" for the root) and
// returns it as a string over buf, with the offset in req just past the
// name; false when there is no question or it does not parse.
func questionText(buf *[dnswire.MaxNameLen]byte, req []byte) (string, int, bool) {
	if len(req) < headerLen || req[4] == 0 && req[5] == 0 {
		return "", 0, false
	}
	n, end := 0, 0
	for i := headerLen; ; {
		if i >= len(req) {
			return "", 0, false
		}
		l := int(req[i])
		if l == 0 {
			end = i + 1
			break
		}
		if l&0xC0 != 0 || i+1+l > len(req) || n+l+1 > len(buf) {
			return "", 0, false
		}
		if n > 0 {
			buf[n] = '.'
			n++
		}
		for _, c := range req[i+1 : i+1+l] {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[n] = c
			n++
		}
		i += 1 + l
	}
	if n == 0 {
		return "", end, true
	}
	return unsafe.String(&buf[0], n), end, true
}

// domainOf returns the group of name (lowercase, dotted, no final dot):
// its namespace or label under cluster when it is in the cluster domain,
// else its registrable domain, else (a public suffix itself) the name.
func domainOf(name, cluster string) string {
	if cluster != "" {
		if name == cluster {
			return name
		}
		rest, ok := strings.CutSuffix(name, cluster)
		if ok && strings.HasSuffix(rest, ".") {
			rest = rest[:len(rest)-1]
			// rest is e.g. "web.default.svc": keep "default.svc".
			last := rest[strings.LastIndexByte(rest, '.')+1:]
			if (last == "svc" || last == "pod") && len(rest) > len(last) {
				before := rest[:len(rest)-len(last)-1]
				return name[strings.LastIndexByte(before, '.')+1:]
			}
			return name[len(rest)-len(last):]
		}
	}
	suffix, _ := publicsuffix.PublicSuffix(name)
	if len(suffix) >= len(name) {
		return name
	}
	before := name[:len(name)-len(suffix)-1]
	return name[strings.LastIndexByte(before, '.')+1:]
}
