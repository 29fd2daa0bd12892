package dnswire

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"
)

// FuzzParseQuery checks that no input crashes the parser, that an accepted
// query agrees with miekg/dns, and that every error answer unpacks.
func FuzzParseQuery(f *testing.F) {
	f.Add(pack(f, query("www.example.com.", dns.TypeA, nil)))
	f.Add(pack(f, query("a.", dns.TypeAAAA, func(m *dns.Msg) { m.SetEdns0(4096, true) })))
	f.Add(append(hdr(1, 0), 0xc0, 12, 0, 1, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q Query
		err := ParseQuery(b, &q)
		if err == nil {
			var m dns.Msg
			if uerr := m.Unpack(b); uerr == nil {
				if len(m.Question) != 1 || m.Question[0].Qtype != q.QType || m.Question[0].Qclass != q.QClass {
					t.Fatalf("question differs: miekg %v, ours %+v", m.Question, q)
				}
				if (m.IsEdns0() != nil) != q.HasOPT {
					t.Fatalf("OPT differs")
				}
			}
			if !bytes.Equal(asciiLower(q.Name), KeyName(q.Key())) {
				t.Fatalf("key name %q for name %q", KeyName(q.Key()), q.Name)
			}
		}
		pe, _ := err.(*ParseError)
		if err != nil && pe == nil {
			t.Fatalf("error of type %T", err)
		}
		if pe != nil && pe.Rcode < 0 {
			return
		}
		rcode := RcodeServFail
		if pe != nil {
			rcode = pe.Rcode
		}
		out := AppendError(nil, b, &q, rcode)
		var m dns.Msg
		if err := m.Unpack(out); err != nil {
			t.Fatalf("error answer %x does not unpack: %v", out, err)
		}
		if m.Rcode != rcode || m.Id != q.ID {
			t.Fatalf("error answer rcode %d id %d, want %d %d", m.Rcode, m.Id, rcode, q.ID)
		}
	})
}

// FuzzTTLOffsets checks that the walker never reads out of bounds.
func FuzzTTLOffsets(f *testing.F) {
	m := query("a.", dns.TypeA, nil)
	m.Response = true
	rr, _ := dns.NewRR("a. 60 IN A 192.0.2.1")
	m.Answer = []dns.RR{rr}
	f.Add(pack(f, m))
	f.Fuzz(func(t *testing.T, b []byte) {
		offs, err := TTLOffsets(b, nil)
		if err != nil {
			return
		}
		for _, o := range offs {
			if int(o)+4 > len(b) {
				t.Fatalf("offset %d past %d bytes", o, len(b))
			}
		}
	})
}

func asciiLower(b []byte) []byte {
	out := bytes.Clone(b)
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return out
}
