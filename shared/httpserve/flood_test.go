package httpserve

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/httpserve/floodtest"
)

// probeTimeout is kubelet's default probe timeout (timeoutSeconds: 1).
const probeTimeout = 1 * time.Second

// TestFloodDoesNotStarveProbes holds 1,000 connections open to each of two
// servers, one serving /health and /ready, one /metrics, re-dialling every
// connection the server closes; probes and scrapes must keep answering 200
// within kubelet's 1 s timeout, no endpoint failing as many times in a row
// as kubelet's failureThreshold (3), on which kubelet would act. The flood runs in a process of
// its own, as a neighbour's would.
func TestFloodDoesNotStarveProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: floods two servers with 1,000 connections each for several seconds")
	}
	metricsBody := strings.Repeat("nodedns_example_total{a=\"b\"} 1\n", 1000) // about 32 KiB, like a real scrape
	health, hc := startCounted(t, map[string]Handler{"/health": okHandler("OK\n"), "/ready": okHandler("OK\n")})
	metrics, mc := startCounted(t, map[string]Handler{"/metrics": func(b *bytes.Buffer) (int, string) {
		b.WriteString(metricsBody)
		return 200, "text/plain"
	}})
	for _, tt := range []struct {
		name    string
		mode    floodtest.Mode
		sources []string
	}{
		{"idle from one address", floodtest.Idle, []string{"127.0.0.2"}},
		{"idle from 8 addresses", floodtest.Idle, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}},
		{"slowloris from 4 addresses", floodtest.Slowloris, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}},
		// The probes' own address (127.0.0.1), re-dialled as fast as the
		// server closes: without deferred accepts a probe lost its slot
		// in the moment between its connect and its head.
		{"idle from the probes' address", floodtest.Idle, []string{"127.0.0.1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evicted := hc.evictedTotal() + mc.evictedTotal()
			for _, s := range []*Server{health, metrics} {
				floodtest.StartProcess(t, s.Addr().String(), 1000, tt.sources, tt.mode)
			}
			// Idle connections reach Accept only after about a second
			// (TCP_DEFER_ACCEPT): probe the flood's steady state, not its
			// first second.
			time.Sleep(floodSettle)
			var worst time.Duration
			var streaks floodtest.Streaks
			for round := range 10 {
				for _, url := range []string{
					"http://" + health.Addr().String() + "/health",
					"http://" + health.Addr().String() + "/ready",
					"http://" + metrics.Addr().String() + "/metrics",
				} {
					r := floodtest.Get(url, probeTimeout)
					streaks.Add(url, r.Status == 200)
					if r.Status != 200 {
						t.Logf("round %d: GET %s: %d %v after %v", round, url, r.Status, r.Err, r.Elapsed)
					}
					worst = max(worst, r.Elapsed)
				}
				time.Sleep(100 * time.Millisecond)
			}
			evicted = hc.evictedTotal() + mc.evictedTotal() - evicted
			// kubelet acts on failureThreshold failures in a row, not on
			// one probe that missed its 1 s on a starved machine.
			url, run := streaks.Longest()
			if run >= floodtest.KubeletFailureThreshold {
				t.Errorf("%s failed %d times in a row: kubelet (failureThreshold %d) would act", url, run, floodtest.KubeletFailureThreshold)
			}
			t.Logf("%d of 30 probes and scrapes failed, at most %d in a row, slowest %v; %d flood connections evicted meanwhile", streaks.Failed(), run, worst, evicted)
			if evicted < 1000 {
				t.Errorf("only %d connections evicted: the flood did not reach the limits, the test measured nothing", evicted)
			}
		})
	}
}

// floodSettle is how long a flood runs before the probes start: past the
// second after which the kernel hands idle connections to Accept
// (deferAccept), so that the flood holds and cycles the slots.
const floodSettle = 1500 * time.Millisecond

// dialFrom opens an idle connection to s from the local address src.
func dialFrom(t *testing.T, s *Server, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialPending opens a connection from src that holds a pending slot at
// once: its first byte of a head makes the kernel hand it over without
// the deferral of idle ones, and the server reads it, so nothing is left
// unread.
func dialPending(t *testing.T, s *Server, src string) net.Conn {
	t.Helper()
	c := dialFrom(t, s, src)
	if _, err := io.WriteString(c, "G"); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedSoon reports whether the server closes c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

// TestEviction checks the choice of the connection that makes room: at
// its own limit a peer evicts its own oldest idle connection, at the
// server's limit the peer holding the most slots loses one.
func TestEviction(t *testing.T) {
	old := headTimeout
	headTimeout = 30 * time.Second // nothing may close for want of a head
	t.Cleanup(func() { headTimeout = old })
	s := start(t, map[string]Handler{"/health": okHandler("OK\n")})
	settle := func() { time.Sleep(50 * time.Millisecond) }

	// Peer .2 at its limit: its next connection evicts its oldest.
	var two []net.Conn
	for range maxConnsPerPeer {
		two = append(two, dialPending(t, s, "127.0.0.2"))
		settle()
	}
	other := dialPending(t, s, "127.0.0.3")
	settle()
	dialPending(t, s, "127.0.0.2")
	if !closedSoon(two[0], time.Second) {
		t.Errorf("the oldest connection of a peer at its limit stayed open")
	}
	if closedSoon(two[1], 100*time.Millisecond) || closedSoon(other, 100*time.Millisecond) {
		t.Errorf("a peer at its limit evicted more than its oldest, or another peer's")
	}

	// Fill the server: .2 holds 32, .3 holds 1; peers .4-.6 hold 31 each,
	// 126 in all; .7 adds two.
	for _, p := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		for range maxConnsPerPeer - 1 {
			dialPending(t, s, p)
		}
	}
	settle()
	for range maxConns - 126 {
		dialPending(t, s, "127.0.0.7")
	}
	settle()
	// At the limit: a new peer's connection takes a slot of .2, the peer
	// holding the most, and a GET from a new peer is answered.
	got := raw(t, s, "GET /health HTTP/1.1\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Errorf("GET at the server's limit: %q", got)
	}
	if !closedSoon(two[1], time.Second) {
		t.Errorf("at the server's limit, the peer holding the most kept its oldest connection")
	}
	if closedSoon(other, 100*time.Millisecond) {
		t.Errorf("at the server's limit, a peer with one connection lost it")
	}
}
