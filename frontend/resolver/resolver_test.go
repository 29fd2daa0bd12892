package resolver

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// Series of a resolver with DefaultConfig.
var (
	servedStaleSeries = sharedmetrics.Name("coredns_cache_served_stale_total", "server", "dns://:53", "zones", ".", "view", "")
	prefetchSeries    = sharedmetrics.Name("coredns_cache_prefetch_total", "server", "dns://:53", "zones", ".", "view", "")
)

// serve runs a query the way the server does: ServeFast, then ServeSlow on
// a miss.
func serve(t testing.TB, r *Resolver, req []byte, proto server.Proto) (resp []byte, hit bool) {
	t.Helper()
	out, ok := r.ServeFast(buf(), req, proto)
	if ok {
		return out, true
	}
	return r.ServeSlow(context.Background(), buf(), bytes.Clone(req), proto), false
}

func TestMissThenHit(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.7"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	tests := []struct {
		name     string
		edit     func(*dns.Msg)
		wantHit  bool
		wantDO   bool
		wantCD   bool
		wantCall int
	}{
		{"first: miss", nil, false, false, false, 1},
		{"second: hit", nil, true, false, false, 1},
		{"other case: hit", func(m *dns.Msg) { m.Question[0].Name = "WWW.Example.ORG." }, true, false, false, 1},
		{"DO: separate entry", func(m *dns.Msg) { m.SetEdns0(1232, true) }, false, true, false, 2},
		{"DO: hit", func(m *dns.Msg) { m.SetEdns0(4096, true) }, true, true, false, 2},
		{"CD: separate entry", func(m *dns.Msg) { m.CheckingDisabled = true }, false, false, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := pack(t, "www.example.org.", dns.TypeA, tt.edit)
			out, hit := serve(t, r, req, server.UDP)
			if hit != tt.wantHit {
				t.Errorf("hit %v, want %v", hit, tt.wantHit)
			}
			if n := ex.ncalls(); n != tt.wantCall {
				t.Fatalf("%d exchanges, want %d", n, tt.wantCall)
			}
			var in dns.Msg
			_ = in.Unpack(req)
			m := unpack(t, out)
			if m.Id != in.Id || m.Question[0] != in.Question[0] || len(m.Answer) != 1 || m.Rcode != dns.RcodeSuccess {
				t.Errorf("answer %v to %v", m, &in)
			}
			if (m.IsEdns0() != nil) != (in.IsEdns0() != nil) {
				t.Error("OPT presence differs from the query's")
			}
			up := ex.calls[len(ex.calls)-1]
			opt := up.IsEdns0()
			if !up.RecursionDesired || opt == nil || opt.Do() != tt.wantDO || up.CheckingDisabled != tt.wantCD {
				t.Errorf("upstream query %v", up)
			}
			if up.Question[0].Name != "www.example.org." {
				t.Errorf("upstream question %q not lowercased", up.Question[0].Name)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	r, set := newResolver(t, DefaultConfig(), &fakeExchanger{fn: records(t, 0)}, nil)
	tests := []struct {
		name      string
		req       []byte
		wantDrop  bool
		wantRcode int
		reason    string
	}{
		{"short", []byte{1, 2, 3}, true, 0, "short"},
		{"a response", pack(t, "a.", dns.TypeA, func(m *dns.Msg) { m.Response = true }), true, 0, "response"},
		{"no question", pack(t, "a.", dns.TypeA, func(m *dns.Msg) { m.Question = nil }), false, dns.RcodeFormatError, "qdcount"},
		{"notify", pack(t, "a.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), false, dns.RcodeNotImplemented, "opcode"},
		{"EDNS version 1", pack(t, "a.", dns.TypeA, func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.Extra[0].(*dns.OPT).SetVersion(1)
		}), false, dns.RcodeBadVers, "badvers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := r.ServeFast(buf(), tt.req, server.UDP)
			if !ok {
				t.Fatal("malformed query sent to ServeSlow")
			}
			if tt.wantDrop {
				if out != nil {
					t.Errorf("answered %x, want a drop", out)
				}
			} else if m := unpack(t, out); m.Rcode != tt.wantRcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			if reasonErr(tt.reason) == nil {
				t.Fatalf("no parse error has reason %q", tt.reason)
			}
			if got := metricstest.Value(t, set, sharedmetrics.Name("nodedns_malformed_queries_total", "reason", tt.reason)); got != 1 {
				t.Errorf("nodedns_malformed_queries_total{reason=%q} = %v", tt.reason, got)
			}
		})
	}
}

func reasonErr(reason string) *dnswire.ParseError {
	for _, e := range dnswire.Reasons {
		if e.Reason == reason {
			return e
		}
	}
	return nil
}

func TestMismatchNotCached(t *testing.T) {
	tests := []struct {
		name string
		edit func(r *dns.Msg)
	}{
		{"other name", func(r *dns.Msg) { r.Question[0].Name = "evil.example." }},
		{"other type", func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }},
		{"other class", func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }},
		{"not a response", func(r *dns.Msg) { r.Response = false }},
		{"no question with records", func(r *dns.Msg) { r.Question = nil }},
		{"two questions", func(r *dns.Msg) { r.Question = append(r.Question, r.Question[0]) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &fakeExchanger{}
			good := records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.66")
			ex.set(func(m *dns.Msg) (*dns.Msg, error) {
				r, err := good(m)
				tt.edit(r)
				return r, err
			})
			r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
			req := pack(t, "victim.example.", dns.TypeA, nil)
			out, _ := serve(t, r, req, server.UDP)
			if m := unpack(t, out); m.Rcode != dns.RcodeServerFailure || len(m.Answer) != 0 {
				t.Errorf("answer %v, want SERVFAIL", m)
			}
			if _, ok := r.ServeFast(buf(), req, server.UDP); ok {
				t.Error("the mismatched answer was cached")
			}
			if got := metricstest.Value(t, set, "nodedns_upstream_mismatch_total"); got != 1 {
				t.Errorf("nodedns_upstream_mismatch_total = %v", got)
			}
		})
	}
}

func TestSharedResponseNotModified(t *testing.T) {
	var shared *dns.Msg
	ex := &fakeExchanger{}
	good := records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1")
	ex.set(func(m *dns.Msg) (*dns.Msg, error) {
		if shared == nil {
			shared, _ = good(m)
		}
		return shared, nil
	})
	r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "Shared.Example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	serve(t, r, req, server.UDP)
	before := shared.String()
	serve(t, r, pack(t, "shared.example.", dns.TypeA, func(m *dns.Msg) { m.Id = 9 }), server.TCP)
	if shared.String() != before {
		t.Errorf("shared response modified:\n%s\nwas\n%s", shared, before)
	}
}

func TestServeStale(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	cfg := DefaultConfig()
	cfg.Cache.ServeStale = 10 * time.Minute
	r, set := newResolver(t, cfg, ex, clk)
	req := pack(t, "stale.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)

	down := func(*dns.Msg) (*dns.Msg, error) { return nil, errDown }
	tests := []struct {
		name      string
		advance   time.Duration
		backend   func(*dns.Msg) (*dns.Msg, error)
		wantHit   bool // answered by ServeFast
		wantCalls int
		wantRcode int
		wantTTL   uint32
		wantStale float64
	}{
		{"backend down, expired: stale", 61 * time.Second, down, false, 2, dns.RcodeSuccess, 30, 1},
		{"within the recheck interval: stale without asking", 29 * time.Second, down, true, 2, dns.RcodeSuccess, 30, 2},
		{"recheck: backend SERVFAIL, stale", 2 * time.Second, records(t, dns.RcodeServerFailure), false, 3, dns.RcodeSuccess, 30, 3},
		{"past the window: SERVFAIL", 10 * time.Minute, down, false, 4, dns.RcodeServerFailure, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.advance)
			ex.set(tt.backend)
			out, hit := serve(t, r, req, server.UDP)
			if hit != tt.wantHit {
				t.Errorf("hit %v, want %v", hit, tt.wantHit)
			}
			if n := ex.ncalls(); n != tt.wantCalls {
				t.Errorf("%d exchanges, want %d", n, tt.wantCalls)
			}
			m := unpack(t, out)
			if m.Rcode != tt.wantRcode {
				t.Fatalf("rcode %s", dns.RcodeToString[m.Rcode])
			}
			if tt.wantTTL > 0 && (len(m.Answer) != 1 || m.Answer[0].Header().Ttl != tt.wantTTL) {
				t.Errorf("answer %v, want TTL %d", m.Answer, tt.wantTTL)
			}
			if got := metricstest.Value(t, set, servedStaleSeries); got != tt.wantStale {
				t.Errorf("coredns_cache_served_stale_total = %v, want %v", got, tt.wantStale)
			}
		})
	}
}

func TestServfailCachedBriefly(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeServerFailure))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "broken.example.", dns.TypeA, nil)
	if m := unpack(t, first(serve(t, r, req, server.UDP))); m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %d", m.Rcode)
	}
	clk.Advance(4 * time.Second)
	if out, hit := serve(t, r, req, server.UDP); !hit || unpack(t, out).Rcode != dns.RcodeServerFailure {
		t.Error("SERVFAIL not cached for 5s")
	}
	clk.Advance(time.Second)
	if _, hit := serve(t, r, req, server.UDP); hit {
		t.Error("SERVFAIL cached past 5s")
	}
	if n := ex.ncalls(); n != 2 {
		t.Errorf("%d exchanges, want 2", n)
	}
}

func first(b []byte, _ bool) []byte { return b }

func TestPrefetch(t *testing.T) {
	ex := &fakeExchanger{got: make(chan *dns.Msg, 10)}
	ex.set(records(t, dns.RcodeSuccess, "x. 100 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, set := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "Hot.Example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	serve(t, r, req, server.UDP)
	<-ex.got
	serve(t, r, req, server.UDP) // hit 1
	clk.Advance(91 * time.Second)
	if _, hit := serve(t, r, req, server.UDP); !hit { // hit 2, 9% left: prefetch
		t.Fatal("miss")
	}
	select {
	case m := <-ex.got:
		if m.Question[0].Name != "hot.example." || !m.IsEdns0().Do() {
			t.Errorf("prefetch query %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no prefetch")
	}
	// Wait for the refreshed entry: its TTL is whole again.
	q := new(dnswire.Query)
	if err := dnswire.ParseQuery(req, q); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		out, res := r.Cache().Get(buf(), q, 1232)
		if res.Hit && unpack(t, out).Answer[0].Header().Ttl == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("prefetched entry not stored")
		}
	}
	clk.Advance(20 * time.Second) // the original entry would have expired
	if _, hit := serve(t, r, req, server.UDP); !hit {
		t.Error("miss after the prefetch")
	}
	if got := metricstest.Value(t, set, prefetchSeries); got != 1 {
		t.Errorf("coredns_cache_prefetch_total = %v", got)
	}
	if n := ex.ncalls(); n != 2 {
		t.Errorf("%d exchanges, want 2", n)
	}
}

func TestOverloaded(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, set := newResolver(t, DefaultConfig(), ex, clk)
	cold := pack(t, "cold.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	m := unpack(t, r.Overloaded(buf(), cold, server.UDP))
	if m.Rcode != dns.RcodeServerFailure || m.IsEdns0() == nil || m.Question[0].Name != "cold.example." {
		t.Errorf("overloaded answer %v", m)
	}
	warm := pack(t, "warm.example.", dns.TypeA, nil)
	serve(t, r, warm, server.UDP)
	clk.Advance(2 * time.Minute)
	if m := unpack(t, r.Overloaded(buf(), warm, server.UDP)); m.Rcode != dns.RcodeSuccess || m.Answer[0].Header().Ttl != 30 {
		t.Errorf("overloaded with a stale entry: %v", m)
	}
	if got := metricstest.Value(t, set, servedStaleSeries); got != 1 {
		t.Errorf("coredns_cache_served_stale_total = %v", got)
	}
}

func TestMetricsLabels(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "m.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)
	serve(t, r, req, server.UDP)
	serve(t, r, req, server.TCP|server.IPv6)
	serve(t, r, pack(t, "m.example.", dns.TypeMX, nil), server.UDP|server.IPv6)
	// The label lists of CoreDNS v1.15.0 (plugin/metrics/vars,
	// plugin/cache), in their order, and the series' types.
	want := map[string]struct{ labels, typ string }{
		"coredns_dns_requests_total":           {"server,zone,view,proto,family,type", "counter"},
		"coredns_dns_responses_total":          {"server,zone,view,rcode,plugin", "counter"},
		"coredns_dns_request_duration_seconds": {"server,zone,view", "histogram"},
		"coredns_cache_hits_total":             {"server,type,zones,view", "counter"},
		"coredns_cache_misses_total":           {"server,zones,view", "counter"},
		"coredns_cache_requests_total":         {"server,zones,view", "counter"},
		"coredns_cache_entries":                {"server,type,zones,view", "gauge"},
		"coredns_cache_evictions_total":        {"server,type,zones,view", "counter"},
		"coredns_cache_prefetch_total":         {"server,zones,view", "counter"},
		"coredns_cache_served_stale_total":     {"server,zones,view", "counter"},
		"nodedns_malformed_queries_total":      {"reason", "counter"},
		"nodedns_upstream_mismatch_total":      {"", "counter"},
		"nodedns_upstream_errors_total":        {"", "counter"},
	}
	types := families(t, set)
	for family, typ := range types {
		if w, ok := want[family]; !ok {
			t.Errorf("unlisted family %s", family)
		} else if typ != w.typ {
			t.Errorf("%s is a %s, want a %s", family, typ, w.typ)
		}
	}
	seen := map[string]bool{}
	for series := range sharedmetrics.Values(set) {
		family, names := familyOf(t, types, series)
		w, ok := want[family]
		if !ok {
			t.Errorf("unlisted series %s", series)
			continue
		}
		seen[family] = true
		if got := strings.Join(names, ","); got != w.labels {
			t.Errorf("%s labels %q, want %q", series, got, w.labels)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("series %s missing", name)
		}
	}
	hits := `
# HELP coredns_cache_hits_total The count of cache hits.
# TYPE coredns_cache_hits_total counter
coredns_cache_hits_total{server="dns://:53",type="success",zones=".",view=""} 2
coredns_cache_hits_total{server="dns://:53",type="denial",zones=".",view=""} 0
`
	var page bytes.Buffer
	sharedmetrics.Handler(set)(&page)
	if body := page.String(); !strings.Contains(body, hits) || strings.Count(body, "\ncoredns_cache_hits_total{") != 2 {
		t.Errorf("/metrics lacks%s", hits)
	}
	request := func(proto, family, typ string) string {
		return sharedmetrics.Name("coredns_dns_requests_total",
			"server", "dns://:53", "zone", ".", "view", "", "proto", proto, "family", family, "type", typ)
	}
	for _, c := range []struct {
		proto, family, typ string
		want               float64
	}{
		{"udp", "1", "A", 2}, {"tcp", "2", "A", 1}, {"udp", "2", "MX", 1},
		{"tcp", "1", "A", 0}, {"udp", "2", "A", 0}, {"udp", "1", "MX", 0},
	} {
		if got := metricstest.Value(t, set, request(c.proto, c.family, c.typ)); got != c.want {
			t.Errorf(`coredns_dns_requests_total{proto=%q,family=%q,type=%q} = %v, want %v`, c.proto, c.family, c.typ, got, c.want)
		}
	}
	response := func(rcode, plugin string) string {
		return sharedmetrics.Name("coredns_dns_responses_total",
			"server", "dns://:53", "zone", ".", "view", "", "rcode", rcode, "plugin", plugin)
	}
	if got := metricstest.Value(t, set, response("NOERROR", "cache")) + metricstest.Value(t, set, response("NOERROR", "forward")); got != 4 {
		t.Errorf(`coredns_dns_responses_total{rcode="NOERROR"} = %v`, got)
	}
}

// TestCacheSeries checks the series read from the cache at scrape time
// against the cache's own counters, with a different value for each kind
// so that a swapped label shows.
func TestCacheSeries(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(func(m *dns.Msg) (*dns.Msg, error) {
		if strings.HasPrefix(m.Question[0].Name, "nx") {
			return records(t, dns.RcodeNameError, "x. 60 IN SOA ns. host. 1 7200 900 1209600 60")(m)
		}
		return records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1")(m)
	})
	cfg := DefaultConfig()
	cfg.Server = "dns://169.254.20.10:53"
	cfg.Cache.Size = 2
	cfg.Cache.NegativeSize = 1
	r, set := newResolver(t, cfg, ex, &clock{t: time.Unix(1e9, 0)})
	for _, name := range []string{"a.example.", "b.example.", "c.example.", "c.example.", "c.example.", "nx.example.", "nx.example."} {
		serve(t, r, pack(t, name, dns.TypeA, nil), server.UDP)
	}
	st := r.Cache().Stats()
	if st.Hits[0] == st.Hits[1] || st.Entries[0] == st.Entries[1] || st.Evictions[0] == st.Evictions[1] {
		t.Fatalf("stats %+v: want different values per kind", st)
	}
	v := sharedmetrics.Values(set)
	typed := func(family, typ string) string {
		return sharedmetrics.Name(family, "server", cfg.Server, "type", typ, "zones", ".", "view", "")
	}
	plain := func(family string) string {
		return sharedmetrics.Name(family, "server", cfg.Server, "zones", ".", "view", "")
	}
	want := map[string]float64{
		plain("coredns_cache_misses_total"):   float64(st.Misses),
		plain("coredns_cache_requests_total"): float64(st.Misses + st.Hits[0] + st.Hits[1]),
	}
	for k, typ := range []string{"success", "denial"} {
		want[typed("coredns_cache_entries", typ)] = float64(st.Entries[k])
		want[typed("coredns_cache_hits_total", typ)] = float64(st.Hits[k])
		want[typed("coredns_cache_evictions_total", typ)] = float64(st.Evictions[k])
	}
	for name, w := range want {
		if got, ok := v[name]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, w)
		}
	}
	n := 0
	for name := range v {
		if strings.HasPrefix(name, "coredns_cache_") && !strings.HasPrefix(name, "coredns_cache_prefetch_total") &&
			!strings.HasPrefix(name, "coredns_cache_served_stale_total") {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d cache series, want %d", n, len(want))
	}
}

func TestServeFastHitAllocs(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	r, _ := newResolver(t, DefaultConfig(), ex, nil)
	req := pack(t, "svc.ns.svc.cluster.local.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	serve(t, r, req, server.UDP)
	dst := buf()
	if n := testing.AllocsPerRun(1000, func() {
		if _, ok := r.ServeFast(dst, req, server.UDP); !ok {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Errorf("ServeFast allocates %v times per hit", n)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.Server = ""
	cfg.Cache.Size = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "server") || !strings.Contains(err.Error(), "cache size") {
		t.Errorf("Validate() = %v, want both errors", err)
	}
}

func TestTruncatedBackendAnswerPassedOnNotCached(t *testing.T) {
	ex := &fakeExchanger{}
	full := records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1")
	ex.set(func(m *dns.Msg) (*dns.Msg, error) {
		r, err := full(m)
		r.Truncated = true
		return r, err
	})
	r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "tc.example.", dns.TypeA, nil)
	if m := unpack(t, first(serve(t, r, req, server.UDP))); !m.Truncated {
		t.Error("TC from the backend dropped")
	}
	if _, hit := serve(t, r, req, server.UDP); hit {
		t.Error("a truncated answer was cached")
	}
}

// TestReadmeListsMetrics keeps README.md's metrics list in step with the
// registered series.
func TestReadmeListsMetrics(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, set := newResolver(t, DefaultConfig(), &fakeExchanger{fn: records(t, 0)}, nil)
	for family := range families(t, set) {
		if !bytes.Contains(readme, []byte("`"+family+"{")) && !bytes.Contains(readme, []byte("`"+family+"`")) {
			t.Errorf("README.md does not list %s", family)
		}
	}
}

func TestPrefetchServfailKeepsEntry(t *testing.T) {
	ex := &fakeExchanger{got: make(chan *dns.Msg, 10)}
	ex.set(records(t, dns.RcodeSuccess, "x. 100 IN A 192.0.2.1"))
	clk := &clock{t: time.Unix(1e9, 0)}
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	req := pack(t, "keep.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)
	<-ex.got
	serve(t, r, req, server.UDP)
	clk.Advance(91 * time.Second)
	ex.set(records(t, dns.RcodeServerFailure))
	serve(t, r, req, server.UDP) // starts the prefetch, which gets SERVFAIL
	<-ex.got
	r.Close() // waits for the prefetch to finish
	out, hit := r.ServeFast(buf(), req, server.UDP)
	if !hit {
		t.Fatal("the SERVFAIL of a prefetch replaced the entry")
	}
	if m := unpack(t, out); m.Rcode != dns.RcodeSuccess || m.Answer[0].Header().Ttl != 9 {
		t.Errorf("answer %v", m)
	}
}
