package dnswire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/miekg/dns"
)

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	return b
}

func query(name string, qtype uint16, edit func(*dns.Msg)) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 0x1234
	if edit != nil {
		edit(m)
	}
	return m
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		name    string
		msg     *dns.Msg
		raw     func([]byte) []byte // edits the packed bytes
		wantErr error
		check   func(t *testing.T, q *Query)
	}{
		{
			name: "plain A",
			msg:  query("Example.COM.", dns.TypeA, nil),
			check: func(t *testing.T, q *Query) {
				if q.ID != 0x1234 || !q.RD() || q.QType != dns.TypeA || q.QClass != dns.ClassINET {
					t.Errorf("header/question: %+v", q)
				}
				if q.HasOPT || q.UDPSize != 512 || q.DO {
					t.Errorf("EDNS without OPT: %+v", q)
				}
				if string(q.Name) != "\x07Example\x03COM\x00" {
					t.Errorf("name %q", q.Name)
				}
				want := append([]byte("\x07example\x03com\x00"), 0, 1, 0, 1, 0)
				if !bytes.Equal(q.Key(), want) {
					t.Errorf("key %q, want %q", q.Key(), want)
				}
			},
		},
		{
			name: "EDNS DO CD",
			msg: query("a.b.", dns.TypeAAAA, func(m *dns.Msg) {
				m.SetEdns0(4096, true)
				m.CheckingDisabled = true
			}),
			check: func(t *testing.T, q *Query) {
				if !q.HasOPT || !q.DO || q.UDPSize != 4096 || q.EDNSVersion != 0 || !q.CD() {
					t.Errorf("EDNS: %+v", q)
				}
				if f := q.Key()[len(q.Key())-1]; f != KeyDO|KeyCD {
					t.Errorf("key flags %x", f)
				}
			},
		},
		{
			name: "EDNS size below 512 counts as 512",
			msg:  query("a.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(100, false) }),
			check: func(t *testing.T, q *Query) {
				if q.UDPSize != 512 {
					t.Errorf("UDPSize %d", q.UDPSize)
				}
			},
		},
		{
			name: "root name",
			msg:  query(".", dns.TypeNS, nil),
			check: func(t *testing.T, q *Query) {
				if len(q.Name) != 1 {
					t.Errorf("name %q", q.Name)
				}
			},
		},
		{name: "short", raw: func([]byte) []byte { return make([]byte, 11) }, wantErr: ErrShort},
		{name: "response", msg: query("a.", dns.TypeA, func(m *dns.Msg) { m.Response = true }), wantErr: ErrResponse},
		{name: "notify opcode", msg: query("a.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), wantErr: ErrOpcode},
		{name: "update opcode", msg: query("a.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }), wantErr: ErrOpcode},
		{name: "qdcount 0", msg: query("a.", dns.TypeA, func(m *dns.Msg) { m.Question = nil }), wantErr: ErrQDCount},
		{name: "qdcount 2", msg: query("a.", dns.TypeA, func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), wantErr: ErrQDCount},
		{
			name:    "pointer in name",
			raw:     func([]byte) []byte { return append(hdr(1, 0), 1, 'a', 0xc0, 12, 0, 1, 0, 1) },
			wantErr: ErrPointer,
		},
		{
			name:    "pointer loop in name",
			raw:     func([]byte) []byte { return append(hdr(1, 0), 0xc0, 12, 0, 1, 0, 1) },
			wantErr: ErrPointer,
		},
		{
			name:    "reserved label type",
			raw:     func([]byte) []byte { return append(hdr(1, 0), 0x41, 'a', 0, 0, 1, 0, 1) },
			wantErr: ErrName,
		},
		{
			name: "name over 255",
			raw: func([]byte) []byte {
				b := hdr(1, 0)
				for range 5 {
					b = append(b, 63)
					b = append(b, bytes.Repeat([]byte{'a'}, 63)...)
				}
				return append(b, 0, 0, 1, 0, 1)
			},
			wantErr: ErrName,
		},
		{
			name:    "label overruns packet",
			raw:     func([]byte) []byte { return append(hdr(1, 0), 5, 'a', 'b') },
			wantErr: ErrTruncated,
		},
		{
			name:    "no type and class",
			raw:     func([]byte) []byte { return append(hdr(1, 0), 1, 'a', 0, 0) },
			wantErr: ErrTruncated,
		},
		{
			name:    "arcount past end",
			raw:     func([]byte) []byte { return append(hdr(1, 1), 0, 0, 1, 0, 1) },
			wantErr: ErrTruncated,
		},
		{
			name: "two OPT records",
			msg: query("a.", dns.TypeA, func(m *dns.Msg) {
				m.SetEdns0(1232, false)
				m.Extra = append(m.Extra, m.Extra[0])
			}),
			wantErr: ErrOPT,
		},
		{
			name: "OPT owner not root",
			msg: query("a.", dns.TypeA, func(m *dns.Msg) {
				m.SetEdns0(1232, false)
				m.Extra[0].Header().Name = "x."
			}),
			wantErr: ErrOPT,
		},
		{
			name: "EDNS version 1",
			msg: query("a.", dns.TypeA, func(m *dns.Msg) {
				m.SetEdns0(1232, true)
				m.Extra[0].(*dns.OPT).SetVersion(1)
			}),
			wantErr: ErrBadVers,
			check: func(t *testing.T, q *Query) {
				if !q.HasOPT || q.EDNSVersion != 1 || !q.DO {
					t.Errorf("EDNS: %+v", q)
				}
			},
		},
		{
			name: "OPT after other additional records",
			msg: query("a.", dns.TypeA, func(m *dns.Msg) {
				rr, _ := dns.NewRR("a. 60 IN A 192.0.2.1")
				m.Extra = append(m.Extra, rr)
				m.SetEdns0(2048, false)
			}),
			check: func(t *testing.T, q *Query) {
				if !q.HasOPT || q.UDPSize != 2048 {
					t.Errorf("EDNS: %+v", q)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b []byte
			if tt.msg != nil {
				b = pack(t, tt.msg)
			}
			if tt.raw != nil {
				b = tt.raw(b)
			}
			var q Query
			err := ParseQuery(b, &q)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, &q)
			}
		})
	}
}

// hdr returns a query header with the given QDCOUNT and ARCOUNT.
func hdr(qd, ar uint16) []byte {
	b := make([]byte, HeaderLen)
	binary.BigEndian.PutUint16(b, 0xbeef)
	binary.BigEndian.PutUint16(b[4:], qd)
	binary.BigEndian.PutUint16(b[10:], ar)
	return b
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		name      string
		req       []byte
		rcode     int
		wantQ     bool
		wantOPT   bool
		wantRcode int
	}{
		{"formerr without question", append(hdr(2, 0), 0, 0, 1, 0, 1), RcodeFormErr, false, false, dns.RcodeFormatError},
		{"notimp", pack(t, query("a.", dns.TypeA, func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus })), RcodeNotImp, false, false, dns.RcodeNotImplemented},
		{"servfail with question", pack(t, query("A.b.", dns.TypeA, nil)), RcodeServFail, true, false, dns.RcodeServerFailure},
		{"refused with OPT", pack(t, query("a.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })), RcodeRefused, true, true, dns.RcodeRefused},
		{"badvers", pack(t, query("a.", dns.TypeA, func(m *dns.Msg) {
			m.SetEdns0(1232, true)
			m.Extra[0].(*dns.OPT).SetVersion(2)
		})), RcodeBadVers, true, true, dns.RcodeBadVers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q Query
			_ = ParseQuery(tt.req, &q)
			out := AppendError(nil, tt.req, &q, tt.rcode)
			m := new(dns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("unpack %x: %v", out, err)
			}
			if m.Id != q.ID || !m.Response || m.Rcode != tt.wantRcode || m.RecursionDesired != q.RD() {
				t.Errorf("header: %v", m.MsgHdr)
			}
			if got := len(m.Question) == 1; got != tt.wantQ {
				t.Errorf("question present %v, want %v", got, tt.wantQ)
			}
			if tt.wantQ {
				var in dns.Msg
				_ = in.Unpack(tt.req)
				if m.Question[0] != in.Question[0] {
					t.Errorf("question %v, want %v", m.Question[0], in.Question[0])
				}
			}
			opt := m.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT present %v, want %v", opt != nil, tt.wantOPT)
			}
			if opt != nil && (opt.Version() != 0 || opt.UDPSize() != OurUDPSize || opt.Do() != q.DO) {
				t.Errorf("OPT %v", opt)
			}
		})
	}
}

func TestTTLOffsets(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response = true
	for i, s := range []string{
		"www.example.com. 100 IN CNAME web.example.com.",
		"web.example.com. 200 IN A 192.0.2.1",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(i, err)
		}
		m.Answer = append(m.Answer, rr)
	}
	ns, _ := dns.NewRR("example.com. 300 IN NS ns.example.com.")
	glue, _ := dns.NewRR("ns.example.com. 400 IN A 192.0.2.53")
	m.Ns = []dns.RR{ns}
	m.Extra = []dns.RR{glue}
	m.SetEdns0(1232, true) // its TTL field holds flags; must be skipped
	for _, compress := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "compressed"}[compress], func(t *testing.T) {
			m.Compress = compress
			b := pack(t, m)
			offs, err := TTLOffsets(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint32
			for _, o := range offs {
				got = append(got, binary.BigEndian.Uint32(b[o:]))
			}
			want := []uint32{100, 200, 300, 400}
			if len(got) != len(want) {
				t.Fatalf("TTLs %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("TTLs %v, want %v", got, want)
				}
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		b := pack(t, m)
		if _, err := TTLOffsets(b[:len(b)-3], nil); err == nil {
			t.Error("no error on a truncated message")
		}
	})
}

func TestParseQueryAllocs(t *testing.T) {
	b := pack(t, query("www.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) }))
	var q Query
	if n := testing.AllocsPerRun(100, func() { _ = ParseQuery(b, &q) }); n != 0 {
		t.Errorf("ParseQuery allocates %v times", n)
	}
}

func BenchmarkParseQuery(b *testing.B) {
	buf := pack(b, query("www.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) }))
	b.ReportAllocs()
	var q Query
	for b.Loop() {
		_ = ParseQuery(buf, &q)
	}
}
