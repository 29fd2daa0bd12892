package upstream

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

func TestExchangeOneOff(t *testing.T) {
	be := dnstest.Start(t, &backend{ip: net.IPv4(10, 0, 0, 9)})
	for _, network := range []string{"udp", "tcp"} {
		m := dnstest.Query("one.example.", dns.TypeA)
		r, err := Exchange(context.Background(), network, be.Addr, m, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if r.Id != m.Id || answeredBy(r) != "10.0.0.9" {
			t.Errorf("%s: answer %v", network, r)
		}
	}
	// Nothing listens: refused, at once.
	if _, err := Exchange(context.Background(), "tcp", deadAddr(t), dnstest.Query("x.", dns.TypeA), time.Second); Reason(err) != ReasonRefused {
		t.Errorf("dead address: %v, want refused", err)
	}
	// A server that never answers: a timeout within the bound.
	blocked := &backend{ip: net.IPv4(10, 0, 0, 9), block: make(chan struct{})}
	slow := dnstest.Start(t, blocked)
	t.Cleanup(func() { close(blocked.block) }) // before the server's own cleanup
	start := time.Now()
	_, err := Exchange(context.Background(), "tcp", slow.Addr, dnstest.Query("x.", dns.TypeA), 100*time.Millisecond)
	if Reason(err) != ReasonTimeout || time.Since(start) > time.Second {
		t.Errorf("hung server: %v after %v, want a timeout after 100ms", err, time.Since(start))
	}
}
