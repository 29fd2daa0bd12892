package resolver

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestMismatchNotCached(t *testing.T) {
	tests := []struct {
		name string
		edit func(r *dns.Msg)
	}{
		{"other name", func(r *dns.Msg) { r.Question[0].Name = "evil.example." }},
		{"other type", func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }},
		{"other class", func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }},
		{"not a response", func(r *dns.Msg) { r.Response = false }},
		{"other opcode", func(r *dns.Msg) { r.Opcode = dns.OpcodeNotify }},
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
			r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
			req := pack(t, "victim.example.", dns.TypeA, nil)
			out, _ := serve(t, r, req, server.UDP)
			if m := unpack(t, out); m.Rcode != dns.RcodeServerFailure || len(m.Answer) != 0 {
				t.Errorf("answer %v, want SERVFAIL", m)
			}
			if _, ok := r.ServeFast(buf(), req, server.UDP); ok {
				t.Error("the mismatched answer was cached")
			}
			if got := metricstest.Value(t, set, "nodedns_upstream_mismatch_total"); got != 1 {
				t.Errorf("nodedns_upstream_mismatch_total = %v", got)
			}
		})
	}
}
