package holder

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/srcpolicy"
)

// ownAddress returns an IPv4 address of this machine other than loopback:
// a client that sends from it to a socket of the machine is no loopback
// source. The test is skipped without one.
func ownAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no IPv4 address but loopback on this machine: no source outside a loopback-only policy to ask from")
	return ""
}

// relayDenied returns the relay's count of denied sources.
func (h *Holder) relayDenied() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.relay.denied.Load()
}

// TestRelaySourcePolicy: with Config.Sources (the frontend's
// --allow-networks), the relay answers an allowed source through the
// relay address; a source outside gets REFUSED over UDP and a closed
// connection over TCP, reaches no relay address, and is counted.
func TestRelaySourcePolicy(t *testing.T) {
	own := ownAddress(t)
	for _, tc := range []struct {
		policy     string
		ownAllowed bool
	}{
		{"127.0.0.0/8", false},
		{own + "/32", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			tg := startTarget(t)
			pol, err := srcpolicy.Parse([]string{tc.policy}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h, _, addr := relayingHolderOn(t, net.JoinHostPort(own, "0"), []string{tg.addr}, func(c *Config) { c.Sources = pol })
			var relayedWant, deniedWant int64
			for _, cl := range []struct {
				src     string
				allowed bool
			}{
				{"127.0.0.1", true}, // loopback: always answered
				{own, tc.ownAllowed},
			} {
				for _, network := range []string{"udp", "tcp"} {
					q := new(dns.Msg).SetQuestion("svc.example.", dns.TypeA)
					// The frontend's socket is on own: asked from own, the
					// source is no loopback one.
					var local net.Addr = &net.UDPAddr{IP: net.ParseIP(cl.src)}
					if network == "tcp" {
						local = &net.TCPAddr{IP: net.ParseIP(cl.src)}
					}
					c := dns.Client{Net: network, Timeout: 3 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 3 * time.Second}}
					r, _, err := c.Exchange(q, addr)
					switch {
					case cl.allowed:
						relayedWant++
						if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), relayA) {
							t.Errorf("%s from %s: %v, %v; want the relay target's %s", network, cl.src, r, err, relayA)
						}
					case network == "udp":
						deniedWant++
						if err != nil || r.Rcode != dns.RcodeRefused || r.Id != q.Id || len(r.Question) != 1 {
							t.Errorf("udp from %s: %v, %v; want REFUSED with the question", cl.src, r, err)
						}
					default:
						deniedWant++
						if err == nil {
							t.Errorf("tcp from %s: rcode %s; want the connection closed", cl.src, dns.RcodeToString[r.Rcode])
						}
					}
					if err == nil {
						t.Logf("%s from %s: %s", network, cl.src, dns.RcodeToString[r.Rcode])
					} else {
						t.Logf("%s from %s: %v", network, cl.src, err)
					}
				}
			}
			if n := tg.queries.Load(); n != relayedWant {
				t.Errorf("the relay target got %d queries, want %d (the allowed ones only)", n, relayedWant)
			}
			if n := h.relayDenied(); n != deniedWant {
				t.Errorf("denied counts %d, want %d", n, deniedWant)
			}
		})
	}
}
