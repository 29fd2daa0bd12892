package upstream

import (
	"errors"
	"testing"

	"github.com/miekg/dns"
)

// TestMatchQuestion is the question check of RFC 5452 section 9.1, shared
// by the pool and the resolver.
func TestMatchQuestion(t *testing.T) {
	q := dns.Question{Name: "Svc.Example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}
	answer := func(edit func(r *dns.Msg)) *dns.Msg {
		r := new(dns.Msg)
		r.SetQuestion("svc.example.", dns.TypeA)
		r.Response = true
		r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "svc.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}}}
		if edit != nil {
			edit(r)
		}
		return r
	}
	tests := []struct {
		name string
		r    *dns.Msg
		ok   bool
	}{
		{"same question, other case (RFC 4343)", answer(nil), true},
		{"nil", nil, false},
		{"not a response", answer(func(r *dns.Msg) { r.Response = false }), false},
		{"other opcode", answer(func(r *dns.Msg) { r.Opcode = dns.OpcodeNotify }), false},
		{"other name", answer(func(r *dns.Msg) { r.Question[0].Name = "evil.example." }), false},
		{"name differing beyond ASCII case", answer(func(r *dns.Msg) { r.Question[0].Name = "svc.example\\230." }), false},
		{"other type", answer(func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }), false},
		{"other class", answer(func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }), false},
		{"two questions", answer(func(r *dns.Msg) { r.Question = append(r.Question, r.Question[0]) }), false},
		{"no question, records", answer(func(r *dns.Msg) { r.Question = nil }), false},
		{"no question, NXDOMAIN", answer(func(r *dns.Msg) { r.Question, r.Answer, r.Rcode = nil, nil, dns.RcodeNameError }), false},
		{"no question, FORMERR (RFC 6891 section 7)", answer(func(r *dns.Msg) { r.Question, r.Answer, r.Rcode = nil, nil, dns.RcodeFormatError }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := MatchQuestion(tt.r, q)
			if (err == nil) != tt.ok {
				t.Fatalf("MatchQuestion = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrMismatch) {
				t.Errorf("%v does not wrap ErrMismatch", err)
			}
		})
	}
}
