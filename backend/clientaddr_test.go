package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/clientopt"
)

// clientCorefile answers A queries of example.test, refuses 127.0.0.3
// (acl) and logs every query with its client (log), behind nodedns_client
// in the frontend's block; the fallback block relays into it as the
// default Corefile's does, with nodedns_client none.
func clientCorefile(b *backend) string {
	host, port, _ := net.SplitHostPort(b.DNS)
	_, fport, _ := net.SplitHostPort(b.Fallback)
	return fmt.Sprintf(`.:%[2]s {
    bind %[1]s
    nodedns_client
    log
    acl {
        block net 127.0.0.3/32
        allow net 0.0.0.0/0 ::/0
    }
    ready %[4]s
    template IN A example.test {
        answer "{{ .Name }} 60 IN A 192.0.2.1"
    }
}
.:%[3]s {
    bind %[1]s
    nodedns_client none
    forward . %[1]s:%[2]s
}
`, host, port, fport, b.Ready)
}

// askVia sends an A query for name to addr over network from the loopback
// address src, with the client option claiming claim when it is valid.
func askVia(t *testing.T, network, src, addr, name string, claim netip.Addr) *dns.Msg {
	t.Helper()
	var local net.Addr = &net.UDPAddr{IP: net.ParseIP(src)}
	if network == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c := &dns.Client{Net: network, Timeout: 3 * time.Second, Dialer: &net.Dialer{LocalAddr: local}}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	if claim.IsValid() {
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, clientopt.Option(claim))
	}
	var r *dns.Msg
	var err error
	for range 3 { // a UDP query may meet a backend still binding
		if r, _, err = c.Exchange(m, addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("%s %s from %s to %s: %v", network, name, src, addr, err)
	}
	return r
}

// TestClientAddressThroughFrontend: a frontend with --pass-client-address
// in front of the backend makes CoreDNS's acl and log see each pod. Two
// clients on loopback (127.0.0.2, 127.0.0.3) ask through the frontend;
// the acl refuses 127.0.0.3 only. A client's own copy of the option is
// not forwarded, and one sent straight to the backend by anyone but its
// frontend (over UDP, or through the fallback listener's relay) is
// ignored.
func TestClientAddressThroughFrontend(t *testing.T) {
	b, _ := backendPorts(t)
	b.start(t, clientCorefile(b), nil, 30*time.Second)
	fe := startFrontend(t, b, "--pass-client-address=true")
	blocked := netip.MustParseAddr("127.0.0.3")

	if r := askVia(t, "udp", "127.0.0.2", fe, "a.example.test", netip.Addr{}); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("127.0.0.2 through the frontend: %s, want NOERROR with the answer", dns.RcodeToString[r.Rcode])
	}
	if r := askVia(t, "udp", "127.0.0.3", fe, "b.example.test", netip.Addr{}); r.Rcode != dns.RcodeRefused {
		t.Errorf("127.0.0.3 through the frontend: %s, want REFUSED (acl)", dns.RcodeToString[r.Rcode])
	}
	// The REFUSED is not cached: the other pod gets the name answered.
	if r := askVia(t, "udp", "127.0.0.2", fe, "b.example.test", netip.Addr{}); r.Rcode != dns.RcodeSuccess {
		t.Errorf("127.0.0.2 after 127.0.0.3 was refused the name: %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	// A pod's own option is not forwarded: 127.0.0.2 claiming to be
	// 127.0.0.3 is still 127.0.0.2, and 127.0.0.3 claiming another
	// address is still refused. Neither answer carries the option.
	if r := askVia(t, "tcp", "127.0.0.2", fe, "c.example.test", blocked); r.Rcode != dns.RcodeSuccess || clientopt.Has(r) {
		t.Errorf("127.0.0.2 claiming 127.0.0.3: %s (option in answer: %v), want NOERROR without it", dns.RcodeToString[r.Rcode], clientopt.Has(r))
	}
	if r := askVia(t, "udp", "127.0.0.3", fe, "d.example.test", netip.MustParseAddr("127.0.0.2")); r.Rcode != dns.RcodeRefused {
		t.Errorf("127.0.0.3 claiming 127.0.0.2: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}

	// Straight to the backend: the acl itself refuses 127.0.0.3.
	if r := askVia(t, "udp", "127.0.0.3", b.DNS, "e.example.test", netip.Addr{}); r.Rcode != dns.RcodeRefused {
		t.Errorf("127.0.0.3 straight to the backend: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	// A spoofed option over UDP (not the frontend's transport) is removed
	// and ignored: the query stays 127.0.0.5's.
	if r := askVia(t, "udp", "127.0.0.5", b.DNS, "f.example.test", blocked); r.Rcode != dns.RcodeSuccess {
		t.Errorf("UDP from 127.0.0.5 claiming 127.0.0.3: %s, want NOERROR (option ignored)", dns.RcodeToString[r.Rcode])
	}
	// Through the fallback listener over TCP (as another node's frontend
	// would come): removed there, so its relay from loopback carries
	// nothing to trust.
	if r := askVia(t, "tcp", "127.0.0.5", b.Fallback, "g.example.test", blocked); r.Rcode != dns.RcodeSuccess {
		t.Errorf("fallback listener, claiming 127.0.0.3: %s, want NOERROR (option removed)", dns.RcodeToString[r.Rcode])
	}
	// The trusted path: TCP from loopback is believed (the frontend's).
	if r := askVia(t, "tcp", "127.0.0.1", b.DNS, "h.example.test", blocked); r.Rcode != dns.RcodeRefused {
		t.Errorf("TCP from loopback claiming 127.0.0.3: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}

	// The log plugin names the pods.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := b.proc.Output.String()
		ok := strings.Contains(out, "127.0.0.2:0 ") && strings.Contains(out, "a.example.test.") &&
			strings.Contains(out, "127.0.0.3:0 ") && strings.Contains(out, "b.example.test.")
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend's log does not name 127.0.0.2 and 127.0.0.3:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
