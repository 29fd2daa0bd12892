package resolver

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

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
		"nodedns_search_prefetch_total":        {"", "counter"},
		"nodedns_denied_below_nxdomain_total":  {"", "counter"},
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
