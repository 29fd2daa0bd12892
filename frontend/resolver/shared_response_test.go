package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

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
