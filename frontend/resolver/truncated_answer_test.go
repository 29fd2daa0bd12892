package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

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
