package upstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// FuzzRoundTrip feeds arbitrary bytes to the response side of one
// exchange: the length framing (RFC 1035 section 4.2.2), unpacking and the
// match check must fail cleanly, and whatever is accepted must answer the
// question asked.
func FuzzRoundTrip(f *testing.F) {
	const id = 0x1234
	q := dnstest.Query("q.example.", dns.TypeA)
	q.Id = id
	wire, err := pack(q)
	if err != nil {
		f.Fatal(err)
	}
	frame := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
	}
	ok := new(dns.Msg).SetReply(q)
	ok.Answer = append(ok.Answer, &dns.A{Hdr: dns.RR_Header{Name: "q.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(10, 0, 0, 1)})
	other := new(dns.Msg).SetReply(dnstest.Query("other.example.", dns.TypeA))
	other.Id = id
	f.Add(frame(ok))
	f.Add(frame(other))
	f.Add(frame(ok)[:20])      // truncated body
	f.Add([]byte{0})           // truncated length
	f.Add([]byte{0, 2, 0x12})  // length beyond the data
	f.Add([]byte{0, 0})        // empty message
	f.Add(frame(new(dns.Msg))) // ID 0, not a response

	f.Fuzz(func(t *testing.T, resp []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			if _, err := io.ReadFull(server, make([]byte, len(wire))); err != nil {
				return
			}
			_, _ = server.Write(resp)
		}()
		c := &conn{nc: client, w: client, r: bufio.NewReader(client)}
		r, err := c.roundTrip(context.Background(), time.Now().Add(time.Second), wire, id, q.Question[0])
		if err != nil {
			return
		}
		if err := check(r, id, q.Question[0]); err != nil {
			t.Fatalf("accepted a response that fails the check: %v", err)
		}
		if r.Id != id || !r.Response {
			t.Fatalf("accepted %v", r)
		}
	})
}
