package gen

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

func TestCandidates(t *testing.T) {
	search := []string{"team-a.svc.cluster.local.", "svc.cluster.local.", "cluster.local."}
	tests := []struct {
		name  string
		ndots int
		want  []string
	}{
		{"svc-1", 5, []string{"svc-1.team-a.svc.cluster.local.", "svc-1.svc.cluster.local.", "svc-1.cluster.local.", "svc-1."}},
		{"www.example.com", 5, []string{"www.example.com.team-a.svc.cluster.local.", "www.example.com.svc.cluster.local.", "www.example.com.cluster.local.", "www.example.com."}},
		{"a.b.c.d.e.f", 5, []string{"a.b.c.d.e.f.", "a.b.c.d.e.f.team-a.svc.cluster.local.", "a.b.c.d.e.f.svc.cluster.local.", "a.b.c.d.e.f.cluster.local."}},
		{"www.example.com", 2, []string{"www.example.com.", "www.example.com.team-a.svc.cluster.local.", "www.example.com.svc.cluster.local.", "www.example.com.cluster.local."}},
		{"svc-1.team-b.svc.cluster.local.", 5, []string{"svc-1.team-b.svc.cluster.local."}},
	}
	for _, tc := range tests {
		if got := Candidates(tc.name, search, tc.ndots); !slices.Equal(got, tc.want) {
			t.Errorf("Candidates(%q, ndots %d) =\n%q\nwant\n%q", tc.name, tc.ndots, got, tc.want)
		}
	}
	cfg := DefaultConfig()
	if got := cfg.SearchList(); !slices.Equal(got, search) {
		t.Errorf("default search list %q, want %q", got, search)
	}
}

// zone answers A and AAAA for the names in it, NXDOMAIN for others, and
// logs every question in arrival order.
type zone struct {
	names map[string]bool
	// drop returns true for a query to leave unanswered.
	drop func(q dns.Question, n int) bool

	mu   sync.Mutex
	log  []string
	seen map[string]int
}

func (z *zone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	q := r.Question[0]
	z.mu.Lock()
	if z.seen == nil {
		z.seen = map[string]int{}
	}
	key := q.Name + " " + dns.TypeToString[q.Qtype]
	z.seen[key]++
	n := z.seen[key]
	z.log = append(z.log, key)
	z.mu.Unlock()
	if z.drop != nil && z.drop(q, n) {
		return
	}
	m := new(dns.Msg)
	m.SetReply(r)
	if !z.names[strings.ToLower(q.Name)] {
		m.Rcode = dns.RcodeNameError
	} else if q.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: []byte{10, 96, 0, 20}})
	} else if q.Qtype == dns.TypeAAAA {
		// no AAAA records: NOERROR without answers (NODATA), as for a v4-only Service
	}
	_ = w.WriteMsg(m)
}

func (z *zone) questions() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.log)
}

func testConfig(addr string) Config {
	cfg := DefaultConfig()
	cfg.Server = addr
	cfg.Timeout = 200 * time.Millisecond
	return cfg
}

func runLookup(t *testing.T, cfg Config, name string) (Outcome, stats) {
	t.Helper()
	var id uint16
	o, st, err := lookup(netip.MustParseAddrPort(cfg.Server), netip.Addr{}, Candidates(name, cfg.SearchList(), cfg.Ndots), !cfg.NoAAAA, cfg.Timeout, cfg.Attempts,
		func() uint16 { id++; return id }, make([]byte, 65535))
	if err != nil {
		t.Fatal(err)
	}
	return o, st
}

// TestSearchExpansion checks the order of queries on the wire: A and
// AAAA per candidate, the search list in order, stopping at the first
// positive answer.
func TestSearchExpansion(t *testing.T) {
	z := &zone{names: map[string]bool{"svc-1.svc.cluster.local.": true}}
	srv := dnstest.Start(t, z)
	o, st := runLookup(t, testConfig(srv.Addr), "svc-1")
	if o != OK || st.queries != 4 || st.responses != 4 || st.retries != 0 {
		t.Errorf("outcome %v, stats %+v; want ok after 4 queries", o, st)
	}
	got := z.questions()
	// A and AAAA go out together: their order on the wire is either.
	want := [][]string{
		{"svc-1.team-a.svc.cluster.local. A", "svc-1.team-a.svc.cluster.local. AAAA"},
		{"svc-1.svc.cluster.local. A", "svc-1.svc.cluster.local. AAAA"},
	}
	if len(got) != 4 {
		t.Fatalf("questions %q, want %q", got, want)
	}
	for i, pair := range want {
		if !slices.Equal(sortedPair(got[2*i:2*i+2]), pair) {
			t.Errorf("questions %q, want %q", got, want)
		}
	}

	// A name that exists nowhere: all four candidates, then NXDOMAIN.
	z2 := &zone{}
	srv2 := dnstest.Start(t, z2)
	o, st = runLookup(t, testConfig(srv2.Addr), "nothing.example.com")
	if o != NXDomain || st.queries != 8 {
		t.Errorf("outcome %v, stats %+v; want nxdomain after 8 queries", o, st)
	}
	if q := z2.questions(); q[len(q)-1] != "nothing.example.com. AAAA" && q[len(q)-1] != "nothing.example.com. A" {
		t.Errorf("last candidate %q, want the name as is", q[len(q)-1])
	}
}

func sortedPair(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRetries checks that an unanswered query is resent after Timeout,
// that a lookup times out after Attempts, and that SERVFAIL is a failure.
func TestRetries(t *testing.T) {
	t.Run("first A dropped", func(t *testing.T) {
		z := &zone{names: map[string]bool{"svc-1.team-a.svc.cluster.local.": true},
			drop: func(q dns.Question, n int) bool { return q.Qtype == dns.TypeA && n == 1 }}
		cfg := testConfig(dnstest.Start(t, z).Addr)
		start := time.Now()
		o, st := runLookup(t, cfg, "svc-1")
		took := time.Since(start)
		// The AAAA answer came in the first attempt: only A is resent.
		if o != OK || st.queries != 3 || st.retries != 1 || st.responses != 2 {
			t.Errorf("outcome %v, stats %+v; want ok after 3 queries and 1 retry", o, st)
		}
		if took < cfg.Timeout {
			t.Errorf("took %v, less than the %v timeout before the retry", took, cfg.Timeout)
		}
	})
	t.Run("never answered", func(t *testing.T) {
		z := &zone{drop: func(dns.Question, int) bool { return true }}
		cfg := testConfig(dnstest.Start(t, z).Addr)
		cfg.Attempts = 3
		start := time.Now()
		o, st := runLookup(t, cfg, "svc-1")
		took := time.Since(start)
		// A timeout ends the lookup: the next search domain is not tried.
		if o != Timeout || st.queries != 6 || st.responses != 0 || len(z.questions()) != 6 {
			t.Errorf("outcome %v, stats %+v, questions %q; want timeout after 3 attempts of A+AAAA", o, st, z.questions())
		}
		if took < 3*cfg.Timeout || took > 3*cfg.Timeout+time.Second {
			t.Errorf("took %v, want about 3 x %v", took, cfg.Timeout)
		}
	})
	t.Run("servfail", func(t *testing.T) {
		h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetRcode(r, dns.RcodeServerFailure)
			_ = w.WriteMsg(m)
		})
		o, st := runLookup(t, testConfig(dnstest.Start(t, h).Addr), "svc-1")
		if o != Failed || st.queries != 8 {
			t.Errorf("outcome %v, stats %+v; want failed after trying every candidate", o, st)
		}
	})
	t.Run("A only", func(t *testing.T) {
		z := &zone{names: map[string]bool{"svc-1.team-a.svc.cluster.local.": true}}
		cfg := testConfig(dnstest.Start(t, z).Addr)
		cfg.NoAAAA = true
		if o, st := runLookup(t, cfg, "svc-1"); o != OK || st.queries != 1 {
			t.Errorf("outcome %v, stats %+v; want ok after 1 query", o, st)
		}
	})
}

// TestOpenLoopRate runs a fixed rate for two seconds. The achieved rate
// is printed; the assertion is loose because the machine is shared.
func TestOpenLoopRate(t *testing.T) {
	z := &zone{names: map[string]bool{"svc-1.team-a.svc.cluster.local.": true}}
	cfg := testConfig(dnstest.Start(t, z).Addr)
	cfg.Mix, _ = NewMix([]Entry{{"svc-1", 1}})
	cfg.Rate, cfg.Duration, cfg.Pods = 1000, 2*time.Second, 10
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := float64(res.Lookups) / cfg.Duration.Seconds()
	t.Logf("target %d lookups/s, started %.0f/s (%.1f%%), answered %.0f/s, p50 %v p99 %v, %d seconds in the series",
		cfg.Rate, got, 100*got/float64(cfg.Rate), res.Rate(), res.Percentiles.P50, res.Percentiles.P99, len(res.Series))
	// Only gross errors fail: a busy machine delays the scheduler.
	if got < 0.3*float64(cfg.Rate) || got > 1.02*float64(cfg.Rate) {
		t.Errorf("started %.0f lookups/s, target %d", got, cfg.Rate)
	}
	if res.OK+res.Timeouts != res.Lookups || res.Queries != 2*res.Lookups+res.Retries {
		t.Errorf("result %+v", res)
	}
	var started uint64
	for _, s := range res.Series {
		started += s.Started
	}
	if started != res.Lookups || len(res.Series) < 2 {
		t.Errorf("series started %d in %d seconds, total %d", started, len(res.Series), res.Lookups)
	}
}

// TestClosedLoopSmoke is the short smoke run of the generator: the
// built-in mix against a server that knows the built-in cluster.
func TestClosedLoopSmoke(t *testing.T) {
	names := map[string]bool{"kubernetes.default.svc.cluster.local.": true, "api.example.com.": true}
	for i := range BuiltinServices {
		for _, ns := range []string{BuiltinNamespace, BuiltinOtherNamespace} {
			names[strings.ToLower(dns.Fqdn("svc-"+strconv.Itoa(i)+"."+ns+".svc.cluster.local"))] = true
		}
	}
	for i := range 50 {
		names["www"+strconv.Itoa(i)+".example.com."] = true
	}
	cfg := testConfig(dnstest.Start(t, &zone{names: names}).Addr)
	cfg.Duration, cfg.Pods = time.Second, 4
	var progress strings.Builder
	cfg.Progress = &progress
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = res.WriteText(&text)
	t.Logf("\n%s%s", progress.String(), text.String())
	if res.Lookups == 0 || res.Failed != 0 || res.Errors != 0 || res.Answered()+res.Timeouts != res.Lookups {
		t.Errorf("result: %s", text.String())
	}
	// The flood's 5% share is the only NXDOMAIN source.
	if share := float64(res.NXDomain) / float64(res.Answered()); share < 0.01 || share > 0.12 {
		t.Errorf("nxdomain share %.3f, want about 0.05", share)
	}
	if res.Percentiles.P50 <= 0 || res.Percentiles.P99 < res.Percentiles.P50 || res.Percentiles.Max < res.Percentiles.P999 {
		t.Errorf("percentiles %+v", res.Percentiles)
	}
}
