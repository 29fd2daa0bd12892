package resolver

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"

	"github.com/nodedns/nodedns/frontend/server"
	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// TestZoneTransferRefused: AXFR and IXFR from pods are answered REFUSED
// (RFC 5936 §4.2) by the fast path, over UDP and TCP, and the backend is
// never asked.
func TestZoneTransferRefused(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN SOA ns. host. 1 2 3 4 60"))
	r, set := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})

	tests := []struct {
		name  string
		qtype uint16
		proto server.Proto
	}{
		{"AXFR over TCP", dns.TypeAXFR, server.TCP},
		{"AXFR over UDP", dns.TypeAXFR, server.UDP},
		{"IXFR over TCP", dns.TypeIXFR, server.TCP},
		{"IXFR over UDP, IPv6", dns.TypeIXFR, server.UDP | server.IPv6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := pack(t, "Cluster.Local.", tt.qtype, func(m *dns.Msg) { m.SetEdns0(1232, false) })
			out, ok := r.ServeFast(buf(), req, tt.proto)
			if !ok {
				t.Fatal("not answered by ServeFast: the query would go to the backend")
			}
			m := unpack(t, out)
			if m.Rcode != dns.RcodeRefused || m.Id != 0x4242 || !m.Response {
				t.Errorf("rcode %s, id %#x, QR %v; want REFUSED to id 0x4242", dns.RcodeToString[m.Rcode], m.Id, m.Response)
			}
			if len(m.Question) != 1 || m.Question[0].Name != "Cluster.Local." || m.Question[0].Qtype != tt.qtype {
				t.Errorf("question %v not echoed", m.Question)
			}
			if m.IsEdns0() == nil {
				t.Error("no OPT record in the answer to a query with one")
			}
		})
	}
	if n := ex.ncalls(); n != 0 {
		t.Errorf("the backend got %d queries", n)
	}
	refused := sharedmetrics.Name(responsesFamily, "server", "dns://:53", "zone", ".", "view", "", "rcode", "REFUSED", "plugin", "")
	if got := metricstest.Value(t, set, refused); got != float64(len(tests)) {
		t.Errorf("%s = %v, want %d", refused, got, len(tests))
	}
	axfrTCP := sharedmetrics.Name(requestsFamily, "server", "dns://:53", "zone", ".", "view", "", "proto", "tcp", "family", "1", "type", "AXFR")
	if got := metricstest.Value(t, set, axfrTCP); got != 1 {
		t.Errorf("%s = %v, want 1", axfrTCP, got)
	}
}

// TestZoneTransferRefusedOverTCPServer sends an AXFR the way a pod would,
// over TCP to a running server, and checks that it is refused without the
// backend seeing it.
func TestZoneTransferRefusedOverTCPServer(t *testing.T) {
	ex := &fakeExchanger{}
	ex.set(records(t, dns.RcodeSuccess, "x. 60 IN SOA ns. host. 1 2 3 4 60"))
	r, _ := newResolver(t, DefaultConfig(), ex, nil)
	s, err := server.New(server.Config{Listen: []string{"127.0.0.1:0"}}, r, zaptest.NewLogger(t), sharedmetrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})

	q := new(dns.Msg)
	q.SetAxfr("cluster.local.")
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	resp, _, err := c.Exchange(q, s.Addrs()[0])
	if err != nil {
		t.Fatalf("AXFR over TCP: %v", err)
	}
	if resp.Rcode != dns.RcodeRefused {
		t.Errorf("AXFR over TCP: rcode %s, want REFUSED", dns.RcodeToString[resp.Rcode])
	}
	if n := ex.ncalls(); n != 0 {
		t.Errorf("the backend got %d queries", n)
	}
}
