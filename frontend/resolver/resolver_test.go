package resolver

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
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
