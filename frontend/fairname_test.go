package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// The tests below run the real backend (CoreDNS: NODEDNS_BACKEND, else
// bin/nodedns-backend, else built here) forwarding hang.example to a UDP
// socket that never answers, as a domain whose servers hang, and answering
// every other A query from its template plugin.

// backendBin returns the backend binary to run.
func backendBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NODEDNS_BACKEND"); bin != "" {
		return bin
	}
	if bin, err := filepath.Abs(filepath.Join("..", "bin", "nodedns-backend")); err == nil {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	return proctest.Build(t, "github.com/nodedns/nodedns/backend", "nodedns-backend")
}

// hangingUDP is an upstream whose servers never answer: a UDP socket
// nobody reads (the backend asks it over UDP: prefer_udp, since the
// frontend's exchanges are TCP). Its address is returned.
func hangingUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// startHangingBackend runs the backend on addr (free), forwarding
// hang.example to hang. It is killed when the test ends, before the
// frontends started earlier stop: the misses it still holds then fail at
// once instead of holding the frontend's shutdown.
func startHangingBackend(t *testing.T, addr, hang string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "Corefile")
	corefile := fmt.Sprintf(`hang.example:%[1]s {
    bind 127.0.0.1
    forward . %[2]s {
        prefer_udp
    }
}
.:%[1]s {
    bind 127.0.0.1
    template IN SOA in-addr.arpa {
        rcode NOERROR
    }
    template IN A {
        answer "{{ .Name }} 60 IN A 192.0.2.1"
    }
}
`, port, hang)
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, "backend "+addr, exec.Command(backendBin(t), "-conf", conf, "-quiet"))
	t.Cleanup(func() { _ = p.Cmd.Process.Kill() })
	for deadline := time.Now().Add(10 * time.Second); !proctest.Listening(addr); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("backend on %s did not listen within 10s", addr)
		}
	}
}

// missTally counts a group's ordinary misses by outcome.
type missTally struct{ ok, failed, timeout atomic.Int64 }

func (m *missTally) total() int64 { return m.ok.Load() + m.failed.Load() + m.timeout.Load() }

// askMisses sends a new name of its own domain (c<client>.example) from
// src every interval until stop, waiting for each answer up to 2s.
func askMisses(t *testing.T, src, addr string, client int, stop time.Time, tally *missTally) {
	c := dialUDPFrom(t, src, addr)
	buf := make([]byte, 1232)
	for n := 0; time.Now().Before(stop); n++ {
		q := dnstest.Query(fmt.Sprintf("n%d.c%d.example.", n, client), dns.TypeA)
		b, _ := q.Pack()
		_, _ = c.Write(b)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			k, err := c.Read(buf)
			if err != nil {
				tally.timeout.Add(1)
				break
			}
			r := new(dns.Msg)
			if r.Unpack(buf[:k]) == nil && r.Id == q.Id {
				if r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 {
					tally.ok.Add(1)
				} else {
					tally.failed.Add(1)
				}
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSlowDomainFromSharedAddress: one client at the node's shared
// address (127.0.0.1, as hostNetwork pods and kubelet are) sends 1,000
// names a second under hang.example, whose servers never answer, for 3s;
// 40 clients at the same address and 40 at addresses of their own
// (127.0.0.3-42) each ask a new name of their own domain every 50ms, a
// miss each. At least 99% of each group's misses must be answered
// NOERROR, with and without a fallback; the slow domain's refusals are
// counted as inflight_domain; and once the flood stops, the first
// ordinary miss from the flooding address is answered within 2s.
func TestSlowDomainFromSharedAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 10 s load test")
	}
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			hang := hangingUDP(t)
			beAddr := dnstest.FreeAddr(t)
			args := baseArgs(t, beAddr)
			var fbAddr string
			if fallback {
				fbAddr = dnstest.FreeAddr(t)
				args = append(args, "--fallback="+fbAddr)
			}
			l := startRun(t, args...)
			addr := l.DNS[0]
			startHangingBackend(t, beAddr, hang)
			if fallback {
				startHangingBackend(t, fbAddr, hang)
			}
			// The backend answers through the frontend before the load.
			warm := dialUDPFrom(t, "127.0.0.2", addr)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				r, err := exchangeOn(warm, dnstest.Query("warm.example.", dns.TypeA), time.Second)
				if err == nil && r.Rcode == dns.RcodeSuccess {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the backend does not answer through the frontend: %v %v", r, err)
				}
			}

			const (
				flood   = 3 * time.Second
				clients = 40
				hogRate = 1000
			)
			start := time.Now()
			stop := start.Add(flood)
			var wg sync.WaitGroup
			var hogSent atomic.Int64
			hog := dialUDPFrom(t, "127.0.0.1", addr)
			wg.Go(func() {
				// Paced by the clock, not by one tick per name: a loaded
				// machine merges ticks, and the rate must hold.
				for n := 0; time.Now().Before(stop); time.Sleep(5 * time.Millisecond) {
					for due := int(time.Since(start) * hogRate / time.Second); n < due; n++ {
						b, _ := dnstest.Query(fmt.Sprintf("s%d.hang.example.", n), dns.TypeA).Pack()
						_, _ = hog.Write(b) // answers not read
						hogSent.Add(1)
					}
				}
			})
			var same, other missTally
			for i := range clients {
				wg.Go(func() { askMisses(t, "127.0.0.1", addr, i, stop, &same) })
				wg.Go(func() { askMisses(t, fmt.Sprintf("127.0.0.%d", 3+i), addr, clients+i, stop, &other) })
			}
			wg.Wait()

			// Recovery: the flooding address's next ordinary miss.
			ended := time.Now()
			var recovered time.Duration
			c := dialUDPFrom(t, "127.0.0.1", addr)
			for n := 0; ; n++ {
				r, err := exchangeOn(c, dnstest.Query(fmt.Sprintf("after%d.example.", n), dns.TypeA), 500*time.Millisecond)
				if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 {
					recovered = time.Since(ended)
					break
				}
				if time.Since(ended) > 10*time.Second {
					t.Fatalf("no ordinary miss answered within 10s of the flood's end (last: %v %v)", r, err)
				}
				time.Sleep(10 * time.Millisecond) // a client retrying, not a flood
			}

			body := httpGet(t, "http://"+l.Metrics+"/metrics", 200)
			byDomain := seriesValue(t, body, `nodedns_server_refused_total{reason="inflight_domain"}`)
			bySource := seriesValue(t, body, `nodedns_server_refused_total{reason="inflight_source"}`)
			t.Logf("FIGURE slow domain from a shared address (fallback=%v): hog sent %d names of hang.example in %v; "+
				"same address: %d of %d misses NOERROR (%d failed, %d timed out); other addresses: %d of %d NOERROR (%d failed, %d timed out); "+
				"refused inflight_domain=%v inflight_source=%v; first ordinary miss after the flood answered %v after it ended",
				fallback, hogSent.Load(), flood, same.ok.Load(), same.total(), same.failed.Load(), same.timeout.Load(),
				other.ok.Load(), other.total(), other.failed.Load(), other.timeout.Load(), byDomain, bySource, recovered.Round(time.Millisecond))
			if n := hogSent.Load(); n < hogRate*int64(flood/time.Second)*9/10 {
				t.Errorf("the flood sent %d names in %v, under 90%% of %d a second", n, flood, hogRate)
			}
			for _, g := range []struct {
				name  string
				tally *missTally
			}{{"same address", &same}, {"other addresses", &other}} {
				total := g.tally.total()
				if total < clients*int64(flood/(100*time.Millisecond)) {
					t.Errorf("%s: only %d misses sent: the clients were starved, not the frontend", g.name, total)
				}
				if g.tally.ok.Load()*100 < total*99 {
					t.Errorf("%s: %d of %d ordinary misses answered NOERROR, want at least 99%%", g.name, g.tally.ok.Load(), total)
				}
			}
			if byDomain == 0 {
				t.Error("no miss refused for its domain's share: the flood never reached it, the test shows nothing")
			}
			if recovered > 2*time.Second {
				t.Errorf("first ordinary miss answered %v after the flood, want within 2s", recovered)
			}
		})
	}
}

// exchangeOn sends q on the connected UDP socket c and waits up to d for
// its answer.
func exchangeOn(c net.Conn, q *dns.Msg, d time.Duration) (*dns.Msg, error) {
	b, err := q.Pack()
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1232)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		r := new(dns.Msg)
		if r.Unpack(buf[:k]) == nil && r.Id == q.Id {
			return r, nil
		}
	}
}

// TestTCPIdleMakesRoom: a client holds every TCP connection its address
// may (125), idle; a new connection from the same address is served (its
// oldest idle one is closed, RFC 7766 section 6.2.3), and so is one from
// another address.
func TestTCPIdleMakesRoom(t *testing.T) {
	be := dnstest.Start(t, &backend{})
	l := startRun(t, baseArgs(t, be.Addr)...)
	addr := l.DNS[0]
	const share = 125 // DefaultMaxTCPConns / DefaultSourceShare
	var held []net.Conn
	for range share {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dc := &dns.Conn{Conn: c}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		q := dnstest.Query("tcp-"+src+".example.", dns.TypeA)
		if err := dc.WriteMsg(q); err != nil {
			t.Fatalf("from %s: %v", src, err)
		}
		r, err := dc.ReadMsg()
		if err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("new connection from %s while %s holds %d idle: %v %v", src, "127.0.0.2", share, r, err)
		}
	}
	body := httpGet(t, "http://"+l.Metrics+"/metrics", 200)
	evicted := seriesValue(t, body, "nodedns_server_tcp_evicted_total")
	refused := seriesValue(t, body, `nodedns_server_refused_total{reason="tcp_conns_source"}`)
	t.Logf("FIGURE tcp: %d idle connections held from one address; a new one from it and one from another answered; evicted=%v refused=%v", share, evicted, refused)
	if evicted != 1 || refused != 0 {
		t.Errorf("evicted=%v refused=%v, want the oldest idle connection of the same address closed once, nothing refused", evicted, refused)
	}
	// The one closed is the oldest.
	_ = held[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest idle connection is still open")
	}
}

// seriesValue returns the value of series (name and labels, as written)
// in a /metrics body; the test fails when it is missing.
func seriesValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}
