package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// hangHandler makes every query a miss; ServeSlow of a name whose first
// label starts with "slow" hangs until release is closed (a name whose
// servers never answer), any other takes a millisecond (an ordinary miss).
type hangHandler struct {
	fakeHandler
	release chan struct{}
}

func (*hangHandler) ServeFast(_, _ []byte, _ Proto) ([]byte, bool) { return nil, false }

func (h *hangHandler) ServeSlow(ctx context.Context, dst, req []byte, _ Proto) []byte {
	if strings.HasPrefix(firstLabel(req), "slow") {
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return nil
	}
	time.Sleep(time.Millisecond)
	return answer(dst, req)
}

// dialFrom connects to addr over network from the loopback address src
// (127.0.0.x): each such address is a client of its own to the server.
func dialFrom(t testing.TB, network, src, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	ip := net.ParseIP(src)
	if network == "udp" {
		d.LocalAddr = &net.UDPAddr{IP: ip}
	} else {
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return d.Dial(network, addr)
}

// TestFairShareSlowNames: one client sends 1,000 queries a second of
// names that never resolve, while 40 other clients resolve ordinary
// misses. The slow client may hold only its share of the in-flight
// misses, so at least 99% of the others' misses are answered NOERROR.
// With one shared budget, the slow names fill every slot after two
// seconds (--max-inflight is 2000) and the others get SERVFAIL.
func TestFairShareSlowNames(t *testing.T) {
	h := &hangHandler{release: make(chan struct{})}
	s, _ := startServer(t, Config{}, h)
	t.Cleanup(func() { close(h.release) }) // before the server's shutdown
	addr := s.Addrs()[0]
	const (
		duration = 3500 * time.Millisecond
		clients  = 40
		hogRate  = 1000 // queries a second
	)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup

	hog, err := dialFrom(t, "udp", "127.0.0.2", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	var hogSent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for i := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Catch up on late ticks: the rate holds on a loaded machine.
			for due := int(time.Since(start) * hogRate / time.Second); i < due; i++ {
				q, _ := new(dns.Msg).SetQuestion(fmt.Sprintf("slow%d.hang.example.", i), dns.TypeA).Pack()
				if _, err := hog.Write(q); err == nil {
					hogSent.Add(1)
				}
			}
		}
	}()

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	for c := range clients {
		conn, err := dialFrom(t, "udp", fmt.Sprintf("127.0.0.%d", 10+c), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1232)
			for k := 0; ctx.Err() == nil; k++ {
				q := new(dns.Msg).SetQuestion(fmt.Sprintf("n%d.c%d.ordinary.example.", k, c), dns.TypeA)
				wire, _ := q.Pack()
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				var r dns.Msg
				_, err := conn.Write(wire)
				if err == nil {
					var n int
					if n, err = conn.Read(buf); err == nil {
						err = r.Unpack(buf[:n])
					}
				}
				switch {
				case err == nil && r.Id == q.Id && r.Rcode == dns.RcodeSuccess:
					ok.Add(1)
				default:
					failed.Add(1)
					if err == nil {
						err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
					}
					firstErr.CompareAndSwap(nil, err.Error())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	total := ok.Load() + failed.Load()
	t.Logf("slow client sent %d queries; ordinary clients: %d of %d misses answered NOERROR; first failure: %v",
		hogSent.Load(), ok.Load(), total, firstErr.Load())
	if total < 1000 {
		t.Fatalf("only %d ordinary misses in %v: the machine is too loaded for this test to mean anything", total, duration)
	}
	if hogSent.Load() < hogRate*int64(duration/time.Second)*9/10 {
		t.Fatalf("the slow client sent %d queries, under %d a second", hogSent.Load(), hogRate)
	}
	if 100*ok.Load() < 99*total {
		t.Errorf("%d of %d ordinary misses answered (%.1f%%), want at least 99%%", ok.Load(), total, 100*float64(ok.Load())/float64(total))
	}
}
