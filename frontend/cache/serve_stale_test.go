package cache

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestServeStale(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServeStale = 10 * time.Minute
	clk := newClock()
	c := newCache(t, cfg, clk)
	b := req(t, "s.example.", dns.TypeA, nil)
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "s.example. 300 IN A 192.0.2.1", "s.example. 10 IN A 192.0.2.2"), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		advance   time.Duration
		ok, stale bool
		wantTTLs  []uint32
	}{
		{5 * time.Second, true, false, []uint32{295, 5}},
		{6 * time.Second, true, true, []uint32{30, 10}}, // RFC 8767 §4: capped at 30
		{10 * time.Minute, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.advance), func(t *testing.T) {
			clk.Advance(tt.advance)
			out, stale, ok := c.GetStale(buf(), q, 512)
			if ok != tt.ok || stale != tt.stale {
				t.Fatalf("ok %v stale %v, want %v %v", ok, stale, tt.ok, tt.stale)
			}
			if ok {
				if got := ttls(unpack(t, out)); !slices.Equal(got, tt.wantTTLs) {
					t.Errorf("TTLs %v, want %v", got, tt.wantTTLs)
				}
			}
		})
	}
}
