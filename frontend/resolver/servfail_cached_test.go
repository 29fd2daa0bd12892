package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

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
