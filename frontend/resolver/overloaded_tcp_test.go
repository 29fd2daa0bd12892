package resolver

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

// TestOverloadedTCPNotTruncated: an answer given for a miss refused for
// capacity (fresh or stale from the cache) is truncated to 512 bytes over
// UDP, and whole over TCP (RFC 7766 section 8: the UDP limit does not
// apply to TCP).
func TestOverloadedTCPNotTruncated(t *testing.T) {
	const n = 40 // 40 A records: well over 512 bytes
	rrs := make([]string, n)
	for i := range rrs {
		rrs[i] = fmt.Sprintf("x. 60 IN A 192.0.2.%d", i+1)
	}
	for _, tc := range []struct {
		name    string
		proto   server.Proto
		advance time.Duration // after caching; past 60s the entry is stale
		wantTC  bool
	}{
		{"udp fresh", server.UDP, 0, true},
		{"tcp fresh", server.TCP, 0, false},
		{"tcp stale", server.TCP, 2 * time.Minute, false},
		{"tcp6 stale", server.TCP | server.IPv6, 2 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &fakeExchanger{}
			ex.set(records(t, dns.RcodeSuccess, rrs...))
			clk := &clock{t: time.Unix(1e9, 0)}
			r, _ := newResolver(t, DefaultConfig(), ex, clk)
			req := pack(t, "big.example.", dns.TypeA, nil) // no EDNS: a 512-byte UDP limit
			serve(t, r, req, server.TCP)                   // cache it
			clk.Advance(tc.advance)
			out := r.Overloaded(buf(), req, tc.proto)
			m := unpack(t, out)
			if m.Truncated != tc.wantTC {
				t.Errorf("TC=%v, want %v (%d bytes)", m.Truncated, tc.wantTC, len(out))
			}
			if tc.wantTC {
				if len(out) > 512 {
					t.Errorf("UDP answer of %d bytes, over 512", len(out))
				}
				return
			}
			if m.Rcode != dns.RcodeSuccess || len(m.Answer) != n || len(out) <= 512 {
				t.Errorf("rcode %d, %d answers in %d bytes; want NOERROR and all %d records", m.Rcode, len(m.Answer), len(out), n)
			}
		})
	}
}
