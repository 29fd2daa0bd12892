package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

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
