package upstream

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/clientopt"
	"github.com/nodedns/nodedns/shared/dnstest"
)

// optRecorder answers every query and records whether it carried the
// client option, and its address.
type optRecorder struct {
	mu   sync.Mutex
	seen []netip.Addr // invalid for a query without the option
}

func (o *optRecorder) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	a, _ := clientopt.Take(r)
	o.mu.Lock()
	o.seen = append(o.seen, a)
	o.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: []byte{192, 0, 2, 1}}}
	_ = w.WriteMsg(m)
}

func (o *optRecorder) got() []netip.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]netip.Addr(nil), o.seen...)
}

// TestClientOptionBackendOnly: the client's address reaches the backend,
// and a fallback gets the same query without it.
func TestClientOptionBackendOnly(t *testing.T) {
	pod := netip.MustParseAddr("10.1.2.3")
	query := func(name string) *dns.Msg {
		m := dnstest.Query(name, dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, clientopt.Option(pod))
		return m
	}

	be := &optRecorder{}
	bs := dnstest.Start(t, be)
	p, _ := newPool(t, Config{Backend: bs.Addr})
	if _, err := p.Exchange(context.Background(), query("a.example.")); err != nil {
		t.Fatal(err)
	}
	if got := be.got(); len(got) != 1 || got[0] != pod {
		t.Errorf("backend saw %v, want [%v]", got, pod)
	}

	// A backend that refuses connections: the query goes to the fallback.
	fb := &optRecorder{}
	fs := dnstest.Start(t, fb)
	p2, _ := newPool(t, Config{Backend: dnstest.FreeAddr(t), Fallbacks: []string{fs.Addr}, ProbeInterval: time.Hour})
	m := query("b.example.")
	if _, err := p2.Exchange(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if got := fb.got(); len(got) != 1 || got[0].IsValid() {
		t.Errorf("fallback saw %v, want one query without the option", got)
	}
	if !clientopt.Has(m) {
		t.Error("Exchange removed the option from the caller's message")
	}
}
