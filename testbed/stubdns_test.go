package testbed

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// recorder is a dns.ResponseWriter that keeps what is written.
type recorder struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (r *recorder) WriteMsg(m *dns.Msg) error { r.msg = m; return nil }

// TestStubAnswers: records, wildcards, NXDOMAIN, and silence under
// StubHangDomain.
func TestStubAnswers(t *testing.T) {
	s := &stubDNS{records: map[string]net.IP{
		"one.test.":      net.IPv4(192, 0, 2, 1).To4(),
		"*.wild.test.":   net.IPv4(192, 0, 2, 2).To4(),
		"own.wild.test.": net.IPv4(192, 0, 2, 3).To4(),
	}}
	for _, c := range []struct {
		name   string
		rcode  int    // -1: no answer at all
		answer string // the A record's address, "" for none
	}{
		{"ONE.test.", dns.RcodeSuccess, "192.0.2.1"},
		{"u1-2.wild.test.", dns.RcodeSuccess, "192.0.2.2"},
		{"own.wild.test.", dns.RcodeSuccess, "192.0.2.3"},
		{"a.b.wild.test.", dns.RcodeNameError, ""},
		{"other.test.", dns.RcodeNameError, ""},
		{"n1." + StubHangDomain, -1, ""},
	} {
		w := &recorder{}
		s.serve(w, new(dns.Msg).SetQuestion(c.name, dns.TypeA))
		switch {
		case c.rcode == -1:
			if w.msg != nil {
				t.Errorf("%s: answered %v, want silence", c.name, w.msg)
			}
		case w.msg == nil:
			t.Errorf("%s: no answer", c.name)
		case w.msg.Rcode != c.rcode:
			t.Errorf("%s: rcode %s, want %s", c.name, dns.RcodeToString[w.msg.Rcode], dns.RcodeToString[c.rcode])
		case c.answer != "" && (len(w.msg.Answer) != 1 || w.msg.Answer[0].(*dns.A).A.String() != c.answer):
			t.Errorf("%s: answer %v, want %s", c.name, w.msg.Answer, c.answer)
		}
	}
}
