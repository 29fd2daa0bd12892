package resolver

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/clientopt"
)

// TestPassClient: with PassClient, the backend query of a miss carries
// the client's address, and a pod's own copy of the option is never
// forwarded; without it, no address is sent. The answer is cached under
// the question alone: the next client gets it from the cache.
func TestPassClient(t *testing.T) {
	pod, other := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.9.9.9")
	for _, pass := range []bool{true, false} {
		ex := &fakeExchanger{fn: records(t, dns.RcodeSuccess, "x 60 IN A 192.0.2.1")}
		cfg := DefaultConfig()
		cfg.PassClient = pass
		r, _ := newResolver(t, cfg, ex, nil)
		// The pod sends its own copy of the option, naming another address.
		req := pack(t, "a.example.org.", dns.TypeA, func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.IsEdns0().Option = append(m.IsEdns0().Option, clientopt.Option(other))
		})
		resp := unpack(t, r.ServeSlowFrom(context.Background(), buf(), req, server.UDP, pod))
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 || clientopt.Has(resp) {
			t.Fatalf("pass=%v: answer %v", pass, resp)
		}
		if ex.ncalls() != 1 {
			t.Fatalf("pass=%v: %d backend queries, want 1", pass, ex.ncalls())
		}
		sent := ex.calls[0].Copy()
		got, ok := clientopt.Take(sent)
		switch {
		case pass && (!ok || got != pod):
			t.Errorf("pass=true: backend query carried %v %v, want %v", got, ok, pod)
		case !pass && ok:
			t.Errorf("pass=false: backend query carried %v", got)
		}
		// Another client: a hit, the cache is keyed by the question only.
		if out, hit := r.ServeFast(buf(), req, server.UDP); !hit || unpack(t, out).Rcode != dns.RcodeSuccess || ex.ncalls() != 1 {
			t.Errorf("pass=%v: second client not answered from the cache (hit %v, %d backend queries)", pass, hit, ex.ncalls())
		}
	}
}
