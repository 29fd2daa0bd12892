// Package dnstest starts in-process DNS servers for tests.
package dnstest

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Server is a DNS server listening on UDP and TCP on the same loopback port.
type Server struct {
	Addr string // host:port, the same for UDP and TCP
	udp  *dns.Server
	tcp  *dns.Server
}

// Start serves h on 127.0.0.1 over UDP and TCP on one free port and stops
// the servers when the test ends.
func Start(t testing.TB, h dns.Handler) *Server {
	t.Helper()
	for attempt := 0; ; attempt++ {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen tcp: %v", err)
		}
		pc, err := net.ListenPacket("udp", tl.Addr().String())
		if err != nil {
			tl.Close()
			if attempt < 10 {
				continue // the UDP port of that number is taken; try another
			}
			t.Fatalf("listen udp: %v", err)
		}
		s := &Server{
			Addr: tl.Addr().String(),
			udp:  &dns.Server{PacketConn: pc, Handler: h},
			tcp:  &dns.Server{Listener: tl, Handler: h},
		}
		start(t, s.udp)
		start(t, s.tcp)
		t.Cleanup(s.Close)
		return s
	}
}

func start(t testing.TB, srv *dns.Server) {
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
}

// Close stops both servers.
func (s *Server) Close() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
}

// Exchange sends q to addr over network ("udp" or "tcp") and fails the test
// on a transport error.
func Exchange(t testing.TB, network, addr string, q *dns.Msg) *dns.Msg {
	t.Helper()
	// 5s rather than the client's 2s default: on a loaded machine (the
	// suite runs packages in parallel, real nodes among them) a backend
	// may take longer than 2s, which no test here asserts against.
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(q, addr)
	if err != nil {
		t.Fatalf("exchange %s %s: %v", network, addr, err)
	}
	return r
}

// Query builds a recursive query for name and qtype.
func Query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return m
}

// FreeAddr returns a 127.0.0.1 address whose port was free for both TCP
// and UDP a moment ago: for a DNS server the test starts as a process,
// which listens on both.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr
	}
	t.Fatal("no port free for both TCP and UDP on 127.0.0.1")
	return ""
}
