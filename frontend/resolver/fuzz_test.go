package resolver

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
)

// FuzzResolver sends arbitrary queries through ServeFast and ServeSlow with
// a backend that answers arbitrary messages (with the question fixed up to
// match when match is set). Every answer must unpack and carry the query's
// ID; a backend answer for another question must never be served.
func FuzzResolver(f *testing.F) {
	q := pack(f, "www.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	r, _ := records(f, dns.RcodeSuccess, "x. 60 IN A 192.0.2.1")(unpack(f, q))
	rb, _ := r.Pack()
	f.Add(q, rb, true, uint8(30), false)
	nx := pack(f, "nx.example.", dns.TypeAAAA, nil)
	r, _ = records(f, dns.RcodeNameError, "x. 60 IN SOA ns.example. h.example. 1 1 1 1 60")(unpack(f, nx))
	rb, _ = r.Pack()
	f.Add(nx, rb, false, uint8(100), true)

	f.Fuzz(func(t *testing.T, qb, rb []byte, match bool, advance uint8, failLater bool) {
		ex := &fakeExchanger{}
		ex.set(func(m *dns.Msg) (*dns.Msg, error) {
			r := new(dns.Msg)
			if err := r.Unpack(rb); err != nil {
				return nil, errDown
			}
			if match {
				r.Response, r.Opcode = true, dns.OpcodeQuery
				r.Question = m.Question
			}
			return r, nil
		})
		clk := &clock{t: time.Unix(1e9, 0)}
		cfg := DefaultConfig()
		cfg.Cache.Size, cfg.Cache.NegativeSize = 8, 8
		res, _ := newResolver(t, cfg, ex, clk)
		var query dnswire.Query
		perr := dnswire.ParseQuery(qb, &query)
		check := func(out []byte, what string) {
			if out == nil {
				if perr == nil {
					t.Fatalf("%s: a valid query was dropped", what)
				}
				return
			}
			m := new(dns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("%s: answer does not unpack: %v\n%x", what, err, out)
			}
			if m.Id != query.ID || !m.Response {
				t.Fatalf("%s: answer header %v for query ID %d", what, m.MsgHdr, query.ID)
			}
			if perr == nil && len(m.Question) == 1 && len(m.Answer) > 0 {
				if !strings.EqualFold(m.Question[0].Name, mustName(t, query.Name)) || m.Question[0].Qtype != query.QType {
					t.Fatalf("%s: answer for %v served to %q", what, m.Question[0], query.Name)
				}
			}
		}
		for i := range 3 {
			for _, proto := range []server.Proto{server.UDP, server.TCP} {
				out, ok := res.ServeFast(buf(), qb, proto)
				if !ok {
					out = res.ServeSlow(context.Background(), make([]byte, 0, 16), bytes.Clone(qb), proto)
				}
				check(out, "serve")
				if perr == nil && proto == server.UDP && len(out) > int(query.UDPSize) {
					t.Fatalf("%d bytes over the client's UDP size %d", len(out), query.UDPSize)
				}
				check(res.Overloaded(buf(), qb, proto), "overloaded")
			}
			clk.Advance(time.Duration(advance) * time.Second)
			if failLater && i == 0 {
				ex.set(func(*dns.Msg) (*dns.Msg, error) { return nil, errDown })
			}
		}
	})
}

func mustName(t *testing.T, wire []byte) string {
	s, _, err := dns.UnpackDomainName(wire, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
