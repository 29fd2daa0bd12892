package resolver

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
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
	r, reg := newResolver(t, DefaultConfig(), &fakeExchanger{fn: records(t, 0)}, nil)
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
			if got := testutil.ToFloat64(r.m.malformed[reasonErr(tt.reason)]); got != 1 {
				t.Errorf("nodedns_malformed_queries_total{reason=%q} = %v", tt.reason, got)
			}
		})
	}
	_ = reg
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
			r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
			req := pack(t, "victim.example.", dns.TypeA, nil)
			out, _ := serve(t, r, req, server.UDP)
			if m := unpack(t, out); m.Rcode != dns.RcodeServerFailure || len(m.Answer) != 0 {
				t.Errorf("answer %v, want SERVFAIL", m)
			}
			if _, ok := r.ServeFast(buf(), req, server.UDP); ok {
				t.Error("the mismatched answer was cached")
			}
			if got := testutil.ToFloat64(r.m.mismatch); got != 1 {
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
	r, _ := newResolver(t, cfg, ex, clk)
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
			if got := testutil.ToFloat64(r.m.servedStale); got != tt.wantStale {
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
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
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
	if got := testutil.ToFloat64(r.m.prefetch); got != 1 {
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
	r, _ := newResolver(t, DefaultConfig(), ex, clk)
	cold := pack(t, "cold.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	m := unpack(t, r.Overloaded(buf(), cold))
	if m.Rcode != dns.RcodeServerFailure || m.IsEdns0() == nil || m.Question[0].Name != "cold.example." {
		t.Errorf("overloaded answer %v", m)
	}
	warm := pack(t, "warm.example.", dns.TypeA, nil)
	serve(t, r, warm, server.UDP)
	clk.Advance(2 * time.Minute)
	if m := unpack(t, r.Overloaded(buf(), warm)); m.Rcode != dns.RcodeSuccess || m.Answer[0].Header().Ttl != 30 {
		t.Errorf("overloaded with a stale entry: %v", m)
	}
	if got := testutil.ToFloat64(r.m.servedStale); got != 1 {
		t.Errorf("coredns_cache_served_stale_total = %v", got)
	}
}

func TestMetricsLabels(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1"))
	r, reg := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	req := pack(t, "m.example.", dns.TypeA, nil)
	serve(t, r, req, server.UDP)
	serve(t, r, req, server.UDP)
	// The label sets of CoreDNS v1.15.0 (plugin/metrics/vars, plugin/cache).
	want := map[string]string{
		"coredns_dns_requests_total":           "family,proto,server,type,view,zone",
		"coredns_dns_responses_total":          "plugin,rcode,server,view,zone",
		"coredns_dns_request_duration_seconds": "server,view,zone",
		"coredns_cache_hits_total":             "server,type,view,zones",
		"coredns_cache_misses_total":           "server,view,zones",
		"coredns_cache_requests_total":         "server,view,zones",
		"coredns_cache_entries":                "server,type,view,zones",
		"coredns_cache_evictions_total":        "server,type,view,zones",
		"coredns_cache_prefetch_total":         "server,view,zones",
		"coredns_cache_served_stale_total":     "server,view,zones",
		"nodedns_malformed_queries_total":      "reason",
		"nodedns_upstream_mismatch_total":      "",
		"nodedns_upstream_errors_total":        "",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		w, ok := want[mf.GetName()]
		if !ok {
			t.Errorf("unlisted series %s", mf.GetName())
			continue
		}
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			if got := strings.Join(names, ","); got != w {
				t.Errorf("%s labels %q, want %q", mf.GetName(), got, w)
			}
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
coredns_cache_hits_total{server="dns://:53",type="denial",view="",zones="."} 0
coredns_cache_hits_total{server="dns://:53",type="success",view="",zones="."} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(hits), "coredns_cache_hits_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(r.m.requests[0][0]); got != 2 {
		t.Errorf(`coredns_dns_requests_total{proto="udp",type="A"} = %v`, got)
	}
	if got := testutil.ToFloat64(r.m.responses[pluginCache][0]) + testutil.ToFloat64(r.m.responses[pluginForward][0]); got != 2 {
		t.Errorf(`coredns_dns_responses_total{rcode="NOERROR"} = %v`, got)
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
	_, reg := newResolver(t, DefaultConfig(), &fakeExchanger{fn: records(t, 0)}, nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !bytes.Contains(readme, []byte("`"+mf.GetName()+"{")) && !bytes.Contains(readme, []byte("`"+mf.GetName()+"`")) {
			t.Errorf("README.md does not list %s", mf.GetName())
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
