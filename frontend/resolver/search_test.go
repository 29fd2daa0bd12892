package resolver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestSearchPathNext(t *testing.T) {
	tests := []struct {
		domain, name string
		want         []string
	}{
		{"cluster.local", "a.example.com.team-a.svc.cluster.local.", []string{"a.example.com.svc.cluster.local.", "a.example.com.cluster.local.", "a.example.com."}},
		{"cluster.local", "Web-0.Nginx.Team-A.SVC.Cluster.Local.", []string{"web-0.nginx.svc.cluster.local.", "web-0.nginx.cluster.local.", "web-0.nginx."}},
		{"Corp.Example.", "x.y.ns.svc.corp.example.", []string{"x.y.svc.corp.example.", "x.y.corp.example.", "x.y."}},
		{"cluster.local", "web.team-a.svc.cluster.local.", nil}, // one label: the usual Service name
		{"cluster.local", "team-a.svc.cluster.local.", nil},
		{"cluster.local", "svc.cluster.local.", nil},
		{"cluster.local", "a.b.svc.cluster.local.", nil}, // NS is b, NAME one label
		{"cluster.local", "a.b.c.svc.other.local.", nil},
		{"cluster.local", "a.b.c.xsvc.cluster.local.", nil},
		{"cluster.local", "a.b.example.com.", nil},
	}
	for _, tt := range tests {
		s, err := newSearchPath(tt.domain)
		if err != nil {
			t.Fatal(err)
		}
		var q dnswire.Query
		if err := dnswire.ParseQuery(pack(t, tt.name, dns.TypeAAAA, nil), &q); err != nil {
			t.Fatal(err)
		}
		var b [searchKeys][dnswire.MaxKeyLen]byte
		var got []string
		keys, ok := s.next(q.Key(), &b)
		if ok != (tt.want != nil) {
			t.Errorf("%s: ok %v", tt.name, ok)
		}
		for _, k := range keys {
			if !ok {
				break
			}
			name, _, err := dns.UnpackDomainName(dnswire.KeyName(k), 0)
			if err != nil {
				t.Fatalf("%s: key %q: %v", tt.name, k, err)
			}
			qt, qc, fl := dnswire.KeyQuestion(k)
			if qt != dns.TypeAAAA || qc != dns.ClassINET || fl != 0 {
				t.Errorf("%s: key %q: type %d class %d flags %d", tt.name, k, qt, qc, fl)
			}
			got = append(got, name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s (domain %s): next %q, want %q", tt.name, tt.domain, got, tt.want)
		}
	}
	for _, bad := range []string{".", "a..b"} {
		if _, err := newSearchPath(bad); err == nil {
			t.Errorf("cluster domain %q accepted", bad)
		}
	}
}

// nxdomain answers every question NXDOMAIN with an SOA, as the kubernetes
// plugin does for a name that is not in the cluster.
func nxdomain(t testing.TB) func(m *dns.Msg) (*dns.Msg, error) {
	return records(t, dns.RcodeNameError, "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")
}

// TestSearchPrefetch follows a pod's lookup of a name that does not exist
// through its search path: the first try's miss fetches the next two, and
// once all three are NXDOMAIN, the names above them (the cuts). The name as
// it is, never asked before, is left for the pod to ask: it is the one
// that goes upstream.
func TestSearchPrefetch(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(nxdomain(t))
	r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	edns := func(m *dns.Msg) { m.SetEdns0(1232, true) }

	serve(t, r, pack(t, "Rnd1.Example.Net.team-a.svc.cluster.local.", dns.TypeA, edns), server.UDP)
	r.wg.Wait() // the prefetches
	var asked []string
	for _, m := range ex.calls {
		if !m.IsEdns0().Do() || m.Question[0].Qtype != dns.TypeA {
			t.Errorf("exchange %v: want type A and DO as the pod's query", m.Question[0])
		}
		asked = append(asked, m.Question[0].Name)
	}
	slices.Sort(asked)
	want := []string{"net.cluster.local.", "net.svc.cluster.local.", "net.team-a.svc.cluster.local.", // the cuts, after the walk
		"rnd1.example.net.cluster.local.", "rnd1.example.net.svc.cluster.local.", "rnd1.example.net.team-a.svc.cluster.local."}
	if !slices.Equal(asked, want) {
		t.Fatalf("backend asked %q, want %q", asked, want)
	}
	for _, name := range []string{"rnd1.example.net.svc.cluster.local.", "rnd1.example.net.cluster.local."} {
		resp, hit := serve(t, r, pack(t, name, dns.TypeA, edns), server.UDP)
		if !hit {
			t.Errorf("%s: miss after the search-path prefetch", name)
		}
		if m := unpack(t, resp); m.Rcode != dns.RcodeNameError || m.Question[0].Name != name {
			t.Errorf("%s: answer %v", name, m)
		}
	}
	if _, hit := serve(t, r, pack(t, "rnd1.example.net.", dns.TypeA, edns), server.UDP); hit {
		t.Error("rnd1.example.net.: a hit, so it was fetched before any client asked it")
	}
	// Only the type asked is prefetched.
	if r.cache.Fresh(keyOf(t, "rnd1.example.net.svc.cluster.local.", dns.TypeAAAA, edns)) {
		t.Error("AAAA cached: only the type asked is prefetched")
	}
	if n := ex.ncalls(); n != 7 {
		t.Errorf("%d exchanges, want 7", n)
	}
	if got := metricstest.Value(t, set, "nodedns_search_prefetch_total"); got != 5 {
		t.Errorf("nodedns_search_prefetch_total = %v, want 5", got)
	}

	// A second miss of the first try (its NXDOMAIN expired, say) starts
	// nothing for tries that are still cached.
	r.searchPrefetch(keyOf(t, "rnd1.example.net.team-a.svc.cluster.local.", dns.TypeA, edns), nil)
	r.wg.Wait()
	if n := ex.ncalls(); n != 7 {
		t.Errorf("%d exchanges after a prefetch of cached names, want 7", n)
	}
}

func keyOf(t testing.TB, name string, qtype uint16, edit func(*dns.Msg)) []byte {
	var q dnswire.Query
	if err := dnswire.ParseQuery(pack(t, name, qtype, edit), &q); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), q.Key()...)
}

// TestSearchPrefetchSkips: no prefetch for a one-label name, outside the
// first search domain, or with the feature off.
func TestSearchPrefetchSkips(t *testing.T) {
	for _, tt := range []struct {
		domain, name string
		off          bool // SearchPrefetch false
	}{
		{"cluster.local", "web.team-a.svc.cluster.local.", false},
		{"cluster.local", "a.example.com.", false},
		{"cluster.local", "a.example.svc.cluster.local.", false}, // NS example, one label
		{"cluster.local", "a.example.com.team-a.svc.other.local.", false},
		{"", "a.example.com.team-a.svc.cluster.local.", false},
		{"cluster.local", "a.example.com.team-a.svc.cluster.local.", true},
	} {
		ex := &fakeExchanger{}
		ex.set(nxdomain(t))
		cfg := DefaultConfig()
		cfg.ClusterDomain = tt.domain
		cfg.SearchPrefetch = !tt.off
		r, _ := newResolver(t, cfg, ex, nil)
		serve(t, r, pack(t, tt.name, dns.TypeA, nil), server.UDP)
		r.wg.Wait()
		if n := ex.ncalls(); n != 1 {
			t.Errorf("%s (domain %q): %d exchanges, want 1", tt.name, tt.domain, n)
		}
	}
}

// gatedExchanger holds every exchange until release is closed.
// askLog records the names a fake backend was asked.
type askLog struct {
	mu    sync.Mutex
	names []string
}

func (l *askLog) record(name string) {
	l.mu.Lock()
	l.names = append(l.names, name)
	l.mu.Unlock()
}

// asked returns how many times name was asked.
func (l *askLog) asked(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(slices.DeleteFunc(slices.Clone(l.names), func(s string) bool { return s != name }))
}

// all returns the names asked, in order.
func (l *askLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.names)
}

type gatedExchanger struct {
	askLog
	release chan struct{}
	answer  func(m *dns.Msg) (*dns.Msg, error)
}

func (g *gatedExchanger) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	g.record(m.Question[0].Name)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.answer(m)
}

// TestSearchPrefetchJoined: the pod's next try, sent while its prefetch is
// still running, waits for that exchange instead of starting another, and
// starts no prefetch of its own: a.b.c.svc.cluster.local. would read as a
// first try (NAME a.b in namespace c).
func TestSearchPrefetchJoined(t *testing.T) {
	g := &gatedExchanger{release: make(chan struct{}), answer: nxdomain(t)}
	r, _ := newResolver(t, DefaultConfig(), g, nil)
	var wg sync.WaitGroup
	for _, name := range []string{"a.b.c.team-a.svc.cluster.local.", "a.b.c.svc.cluster.local."} {
		wg.Go(func() {
			if m := unpack(t, r.ServeSlow(context.Background(), buf(), pack(t, name, dns.TypeA, nil), server.UDP)); m.Rcode != dns.RcodeNameError {
				t.Errorf("%s: %v", name, m)
			}
		})
		time.Sleep(50 * time.Millisecond) // the first try's prefetches start
	}
	close(g.release)
	wg.Wait()
	r.wg.Wait()
	if n := g.asked("a.b.c.svc.cluster.local."); n != 1 {
		t.Errorf("a.b.c.svc.cluster.local. asked %d times, want 1", n)
	}
	if names := g.all(); len(names) != 6 {
		t.Errorf("backend asked %q, want the three tries of a.b.c in the cluster domain and the three cuts above them", names)
	}
}

// TestSearchPrefetchNotWhenBusy: with searchPrefetchBelow exchanges
// running, a miss starts no prefetch, so that a flood of misses gets no
// more exchanges than it sent.
func TestSearchPrefetchNotWhenBusy(t *testing.T) {
	g := &gatedExchanger{release: make(chan struct{}), answer: nxdomain(t)}
	r, set := newResolver(t, DefaultConfig(), g, nil)
	var wg sync.WaitGroup
	for i := range searchPrefetchBelow {
		wg.Go(func() {
			r.ServeSlow(context.Background(), buf(), pack(t, fmt.Sprintf("svc%d.team-a.svc.cluster.local.", i), dns.TypeA, nil), server.UDP)
		})
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		n := len(r.flights)
		r.mu.Unlock()
		if n == searchPrefetchBelow {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d flights running, want %d", n, searchPrefetchBelow)
		}
	}
	wg.Go(func() {
		r.ServeSlow(context.Background(), buf(), pack(t, "x.flood.example.team-a.svc.cluster.local.", dns.TypeA, nil), server.UDP)
	})
	time.Sleep(50 * time.Millisecond)
	close(g.release)
	wg.Wait()
	r.wg.Wait()
	if n := g.asked("x.flood.example.svc.cluster.local."); n != 0 {
		t.Errorf("prefetched %d times with %d exchanges running", n, searchPrefetchBelow)
	}
	if got := metricstest.Value(t, set, "nodedns_search_prefetch_total"); got != 0 {
		t.Errorf("nodedns_search_prefetch_total = %v, want 0", got)
	}
}

// TestSearchPrefetchNeverGuessesUpstream: the name as it is, which goes
// upstream, is never fetched before a client asks it, whatever the tries
// before it get: a StatefulSet pod's name found in its first try, its AAAA
// NODATA on an IPv4 cluster (the 5-dot name is asked as it is, and its
// client never asks pod-0.db.), an SRV name of a Service that does not
// exist, a Service of another namespace found in its second try, or a
// name denied everywhere.
func TestSearchPrefetchNeverGuessesUpstream(t *testing.T) {
	for _, tt := range []struct {
		found string // the one try the backend answers; NODATA for type AAAA
		name  string // the NAME of the pod's query NAME.team-a.svc.cluster.local.
		qtype uint16
	}{
		{"web-0.nginx.team-a.svc.cluster.local.", "web-0.nginx", dns.TypeA},
		{"pod-0.db.team-a.svc.cluster.local.", "pod-0.db", dns.TypeAAAA},
		{"", "_http._tcp.nosuch", dns.TypeSRV},
		{"api.other-ns.svc.cluster.local.", "api.other-ns", dns.TypeA},
		{"", "rnd.example.net", dns.TypeA},
	} {
		ex := &fakeExchanger{}
		found := records(t, dns.RcodeSuccess, "x. 30 IN A 192.0.2.9")
		nodata := records(t, dns.RcodeSuccess, "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")
		ex.set(func(m *dns.Msg) (*dns.Msg, error) {
			switch {
			case m.Question[0].Name == tt.found && m.Question[0].Qtype == dns.TypeAAAA:
				return nodata(m)
			case m.Question[0].Name == tt.found:
				return found(m)
			}
			return nxdomain(t)(m)
		})
		r, _ := newResolver(t, DefaultConfig(), ex, nil)
		serve(t, r, pack(t, tt.name+".team-a.svc.cluster.local.", tt.qtype, nil), server.UDP)
		r.wg.Wait()
		for _, m := range ex.calls {
			if !dns.IsSubDomain("cluster.local.", m.Question[0].Name) {
				t.Errorf("%s %s (found %q): %s fetched, a name outside the cluster no client asked", tt.name, dns.TypeToString[tt.qtype], tt.found, m.Question[0].Name)
			}
		}
	}
}

// clusterGate answers names under cluster.local. with cluster, once gate
// is closed when one is set, and other names with outside at once.
type clusterGate struct {
	askLog                         // its mu also guards gate
	gate             chan struct{} // nil: answer at once
	cluster, outside func(m *dns.Msg) (*dns.Msg, error)
}

func (g *clusterGate) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	g.mu.Lock()
	g.names = append(g.names, m.Question[0].Name)
	gate := g.gate
	g.mu.Unlock()
	if !dns.IsSubDomain("cluster.local.", m.Question[0].Name) {
		return g.outside(m)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.cluster(m)
}

// firstTryWaits serves a pod's first try of name (NAME.team-a.svc.cluster.local.)
// while the cluster's answers are held, and fails unless name itself has
// been asked n times by then; it returns once the lookup and its
// prefetches are done.
func (g *clusterGate) firstTryWaits(t *testing.T, r *Resolver, name string, n int) {
	t.Helper()
	gate := make(chan struct{})
	g.mu.Lock()
	g.gate = gate
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.ServeSlow(context.Background(), buf(), pack(t, name+".team-a.svc.cluster.local.", dns.TypeA, nil), server.UDP)
	}()
	defer func() {
		close(gate)
		<-done
		r.wg.Wait()
	}()
	for deadline := time.Now().Add(2 * time.Second); g.asked(name+".") < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%s. asked %d times while its first try waits for the backend, want %d; asked %q", name, g.asked(name+"."), n, g.all())
			return
		}
	}
}

// TestSearchPrefetchKnownNameAtOnce: once the entries of an external name
// a pod walked to before have expired, a miss of its first try starts the
// exchange of the name as it is at once, while the three tries are still
// with the backend, instead of after their denials: it was asked before.
func TestSearchPrefetchKnownNameAtOnce(t *testing.T) {
	g := &clusterGate{cluster: nxdomain(t), outside: records(t, dns.RcodeSuccess, "www.example.com. 30 IN A 192.0.2.7")}
	clk := &clock{t: time.Unix(1e9, 0)}
	cfg := DefaultConfig()
	cfg.DenyBelowNXDOMAIN = false // the tries go to the backend, held by the gate
	r, _ := newResolver(t, cfg, g, clk)
	walk(t, r, "www.example.com", dns.TypeA)
	r.wg.Wait()
	if n := g.asked("www.example.com."); n != 1 {
		t.Fatalf("www.example.com. asked %d times in the first walk, want 1 (by the pod)", n)
	}
	clk.Advance(time.Minute) // every entry expired, within the serve-stale window
	g.firstTryWaits(t, r, "www.example.com", 2)
	if _, hit := serve(t, r, pack(t, "www.example.com.", dns.TypeA, nil), server.UDP); !hit {
		t.Error("www.example.com.: a miss after the prefetch")
	}
	if n := g.asked("www.example.com."); n != 2 {
		t.Errorf("www.example.com. asked %d times, want 2", n)
	}
	if r.cache.Known(keyOf(t, "other.example.com.", dns.TypeA, nil)) {
		t.Error("Known: a name never asked")
	}
}

// walk serves a pod's lookup of name with kubelet's search path in
// namespace team-a (ndots:5, fewer dots: the search domains first), one
// try after the other as a stub resolver does, and returns the try that
// was answered, or "" when every try was denied.
func walk(t testing.TB, r *Resolver, name string, qtype uint16) string {
	t.Helper()
	for _, suffix := range []string{".team-a.svc.cluster.local.", ".svc.cluster.local.", ".cluster.local.", "."} {
		out, _ := serve(t, r, pack(t, name+suffix, qtype, nil), server.UDP)
		if m := unpack(t, out); !denied(m) {
			return name + suffix
		}
	}
	return ""
}

// TestSearchPrefetchCutsDenyNextWalk: once a walk of one name under a last
// label has fetched the three cuts above its tries, all NXDOMAIN, another
// name's walk under that label is denied from the cache in the cluster
// domain: the backend is asked only the name as it is, when the pod asks
// it, and the cuts, cached, are not fetched again.
func TestSearchPrefetchCutsDenyNextWalk(t *testing.T) {
	g := &clusterGate{cluster: nxdomain(t), outside: nxdomain(t)}
	r, _ := newResolver(t, DefaultConfig(), g, nil)
	walk(t, r, "rnd1.example.net", dns.TypeA)
	r.wg.Wait()
	cuts := []string{"net.team-a.svc.cluster.local.", "net.svc.cluster.local.", "net.cluster.local."}
	for _, c := range cuts {
		if !r.cache.Absent(keyOf(t, c, dns.TypeA, nil)) {
			t.Fatalf("%s: not cached NXDOMAIN after the walk of rnd1.example.net", c)
		}
	}
	if r.cache.Absent(keyOf(t, "net.svc.cluster.local.", dns.TypeAAAA, nil)) {
		t.Error("net.svc.cluster.local. AAAA cached: only the type asked is fetched")
	}
	before := len(g.all())
	if got := walk(t, r, "rnd2.example.net", dns.TypeA); got != "" {
		t.Errorf("walk of rnd2.example.net answered at %s", got)
	}
	r.wg.Wait()
	if asked := g.all()[before:]; !slices.Equal(asked, []string{"rnd2.example.net."}) {
		t.Errorf("the second walk asked the backend %q, want only rnd2.example.net.", asked)
	}
	for _, c := range cuts {
		if n := g.asked(c); n != 1 {
			t.Errorf("%s asked %d times, want 1", c, n)
		}
	}
}

// rfc8020Zone answers as an authoritative server that keeps RFC 8020: a name of
// names gets an A record; a name with one of them under it, NODATA (an
// empty non-terminal, such as a namespace); any other, NXDOMAIN.
func rfc8020Zone(t testing.TB, names ...string) func(m *dns.Msg) (*dns.Msg, error) {
	found := records(t, dns.RcodeSuccess, "x. 30 IN A 192.0.2.9")
	nodata := records(t, dns.RcodeSuccess, "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5")
	return func(m *dns.Msg) (*dns.Msg, error) {
		q := m.Question[0].Name
		for _, n := range names {
			switch {
			case n == q:
				return found(m)
			case dns.IsSubDomain(q, n):
				return nodata(m)
			}
		}
		return nxdomain(t)(m)
	}
}

// TestSearchPrefetchCutKeepsClusterNames: a walk of a name that does not
// exist under a label that is a namespace or a Service of the pod's
// namespace fetches cuts that are not all NXDOMAIN, so a later name under
// that label is still found in the cluster, and never sent upstream.
func TestSearchPrefetchCutKeepsClusterNames(t *testing.T) {
	for _, tt := range []struct {
		denied, found string // NAMEs the pod walks, in turn
		at            string // where found is answered
	}{
		{"nosuch.other-ns", "api.other-ns", "api.other-ns.svc.cluster.local."},            // other-ns.svc.cluster.local. is a namespace: NODATA
		{"web-9.nginx", "web-0.nginx", "web-0.nginx.team-a.svc.cluster.local."},           // nginx.team-a.svc.cluster.local. is a Service
		{"nosuch.svc", "web-0.nginx.team-a.svc", "web-0.nginx.team-a.svc.cluster.local."}, // svc.cluster.local. has names under it: NODATA
		{"x.ns.dns", "ns.dns", "ns.dns.cluster.local."},                                   // dns.cluster.local. is NXDOMAIN, ns.dns.cluster.local. is not
	} {
		g := &clusterGate{
			cluster: rfc8020Zone(t, "api.other-ns.svc.cluster.local.", "web-0.nginx.team-a.svc.cluster.local.", "ns.dns.cluster.local."),
			outside: nxdomain(t),
		}
		// The plugin's own break of RFC 8020: dns.cluster.local. is NXDOMAIN.
		cluster := g.cluster
		g.cluster = func(m *dns.Msg) (*dns.Msg, error) {
			if m.Question[0].Name == "dns.cluster.local." {
				return nxdomain(t)(m)
			}
			return cluster(m)
		}
		r, _ := newResolver(t, DefaultConfig(), g, nil)
		walk(t, r, tt.denied, dns.TypeA)
		r.wg.Wait()
		if got := walk(t, r, tt.found, dns.TypeA); got != tt.at {
			t.Errorf("%s after %s: answered at %q, want %s; backend asked %q", tt.found, tt.denied, got, tt.at, g.all())
		}
		r.wg.Wait()
		if n := g.asked(tt.found + "."); n != 0 {
			t.Errorf("%s: asked %d times as it is, want 0 (found in the cluster); backend asked %q", tt.found, n, g.all())
		}
	}
}

// delayed answers with answer after d, as a backend a round trip away,
// and counts the exchanges.
type delayed struct {
	d      time.Duration
	answer func(m *dns.Msg) (*dns.Msg, error)
	n      *atomic.Int64
}

func (x delayed) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	x.n.Add(1)
	time.Sleep(x.d)
	return x.answer(m)
}

// BenchmarkSearchWalk times a pod's walk of a name never asked before,
// through its search path and then as it is, one query after the other,
// against a backend 1ms away: under a last label whose cuts are cached
// (a random name under .net after one lookup there), with and without
// the denial of the tries from the cuts, and under a new last label each
// time (no cuts: the name waits for the three denials). The first two
// cost about one round trip, the third two; exchanges/op is the backend's
// work per walk.
func BenchmarkSearchWalk(b *testing.B) {
	for _, bb := range []struct {
		name string
		deny bool
		last func(i int) string
	}{
		{"cuts-cached", true, func(int) string { return "net" }},
		{"cuts-cached-no-deny", false, func(int) string { return "net" }},
		{"new-label", true, func(i int) string { return fmt.Sprintf("tld%d", i) }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.DenyBelowNXDOMAIN = bb.deny
			var n atomic.Int64
			r, _ := newResolver(b, cfg, delayed{time.Millisecond, nxdomain(b), &n}, nil)
			walk := func(i int) {
				name := fmt.Sprintf("r%d.example.%s", i, bb.last(i))
				for _, q := range []string{".team-a.svc.cluster.local.", ".svc.cluster.local.", ".cluster.local.", "."} {
					serve(b, r, pack(b, name+q, dns.TypeA, nil), server.UDP)
				}
			}
			walk(-1)
			r.wg.Wait()
			n.Store(0)
			b.ResetTimer()
			for i := range b.N {
				walk(i)
			}
			b.StopTimer()
			r.wg.Wait()
			b.ReportMetric(float64(n.Load())/float64(b.N), "exchanges/op")
		})
	}
}
