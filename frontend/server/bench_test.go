package server

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/metrics"
)

// echoHandler answers every query from ServeFast, as a cache hit would, so
// that the benchmark measures the sockets alone.
type echoHandler struct{ fakeHandler }

func (*echoHandler) ServeFast(dst, req []byte, _ Proto) ([]byte, bool) { return answer(dst, req), true }

// BenchmarkUDPServeFast measures the hit path over loopback: several
// clients on connected sockets keep a window of queries outstanding
// against a server with the default number of sockets. allocs/op counts
// the whole process (the clients allocate nothing either).
//
//	go test ./frontend/server -run '^$' -bench UDPServeFast -benchtime 2000000x
func BenchmarkUDPServeFast(b *testing.B) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}}, &echoHandler{}, zap.NewNop(), metrics.NewSet())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(b.Context()) })
	const clients, window = 4, 32
	q, _ := new(dns.Msg).SetQuestion("hit.example.org.", dns.TypeA).Pack()
	conns := make([]net.Conn, clients)
	for i := range conns {
		c, err := net.Dial("udp", s.Addrs()[0])
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		n := b.N / clients
		if i == 0 {
			n += b.N % clients
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 512)
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			for done := 0; done < n; {
				w := min(window, n-done)
				for range w {
					if _, err := c.Write(q); err != nil {
						b.Error(err)
						return
					}
				}
				for range w {
					if _, err := c.Read(buf); err != nil {
						b.Error(err) // a lost datagram: loopback buffers overflowed
						return
					}
				}
				done += w
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "q/s")
}
