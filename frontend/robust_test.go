package main

import (
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// TestRunSurvivesGarbage throws random datagrams, mutated queries and
// random TCP streams at the frontend, then checks that it still answers.
func TestRunSurvivesGarbage(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	l := startRun(t, baseArgs(t, b.Addr)...)
	addr := l.DNS[0]
	rng := rand.New(rand.NewPCG(1, 2))
	valid, _ := dnstest.Query("garbage.example", dns.TypeA).Pack()

	u, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for i := range 2000 {
		var p []byte
		if i%2 == 0 {
			p = make([]byte, rng.IntN(600))
			for j := range p {
				p[j] = byte(rng.UintN(256))
			}
		} else { // a valid query with a few bytes flipped
			p = append([]byte(nil), valid...)
			for range 1 + rng.IntN(4) {
				p[rng.IntN(len(p))] = byte(rng.UintN(256))
			}
		}
		_, _ = u.Write(p)
	}
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, rng.IntN(3000))
		for j := range p {
			p[j] = byte(rng.UintN(256))
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(p)
		c.Close()
	}
	// Another pod (127.0.0.9) is answered at once: the garbage's misses
	// may still hold the sender's own share of in-flight misses, which is
	// the point of the share, but nobody else's.
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Dialer: &net.Dialer{LocalAddr: localAddr(network, "127.0.0.9")}}
		r, _, err := c.Exchange(dnstest.Query("still.example", dns.TypeA), addr)
		if err != nil {
			t.Fatalf("%s after garbage: %v", network, err)
		}
		if r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s after garbage: %v", network, r)
		}
	}
}

// localAddr is the address ip as a local address of network.
func localAddr(network, ip string) net.Addr {
	if network == "tcp" {
		return &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	return &net.UDPAddr{IP: net.ParseIP(ip)}
}
