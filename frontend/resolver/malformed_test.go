package resolver

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestMalformed(t *testing.T) {
	r, set := newResolver(t, DefaultConfig(), &fakeExchanger{fn: records(t, 0)}, nil)
	tests := []struct {
		name      string
		req       []byte
		wantDrop  bool
		wantRcode int
		reason    string
	}{
		{"short", []byte{1, 2, 3}, true, 0, "short"},
		{"a response", pack(t, "a.", dns.TypeA, func(m *dns.Msg) { m.Response = true }), true, 0, "response"},
		{"no question", pack(t, "a.", dns.TypeA, func(m *dns.Msg) { m.Question = nil }), false, dns.RcodeFormatError, "qdcount"},
		{"notify", pack(t, "a.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), false, dns.RcodeNotImplemented, "opcode"},
		{"EDNS version 1", pack(t, "a.", dns.TypeA, func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.Extra[0].(*dns.OPT).SetVersion(1)
		}), false, dns.RcodeBadVers, "badvers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := r.ServeFast(buf(), tt.req, server.UDP)
			if !ok {
				t.Fatal("malformed query sent to ServeSlow")
			}
			if tt.wantDrop {
				if out != nil {
					t.Errorf("answered %x, want a drop", out)
				}
			} else if m := unpack(t, out); m.Rcode != tt.wantRcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			if reasonErr(tt.reason) == nil {
				t.Fatalf("no parse error has reason %q", tt.reason)
			}
			if got := metricstest.Value(t, set, sharedmetrics.Name("nodedns_malformed_queries_total", "reason", tt.reason)); got != 1 {
				t.Errorf("nodedns_malformed_queries_total{reason=%q} = %v", tt.reason, got)
			}
		})
	}
}

func reasonErr(reason string) *dnswire.ParseError {
	for _, e := range dnswire.Reasons {
		if e.Reason == reason {
			return e
		}
	}
	return nil
}
