package server

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
	benchUDPServeFast(b, Config{Listen: []string{"127.0.0.1:0"}})
}

// BenchmarkUDPServeFastObserved is BenchmarkUDPServeFast with the top
// talkers and the query log (JSON lines written to io.Discard, so that
// their encoding is counted) on or off.
//
//	go test ./frontend/server -run '^$' -bench UDPServeFastObserved -benchtime 2000000x -count 5
func BenchmarkUDPServeFastObserved(b *testing.B) {
	enc := zap.NewProductionEncoderConfig()
	qlog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"off", Config{TopTalkers: 0}},
		{"talkers", Config{TopTalkers: DefaultTopTalkers}},
		{"log=1%", Config{QueryLog: QueryLog{Zones: []string{"."}, Sample: 0.01}}},
		{"talkers+log=1%", Config{TopTalkers: DefaultTopTalkers, QueryLog: QueryLog{Zones: []string{"."}, Sample: 0.01}}},
		{"log=100%", Config{QueryLog: QueryLog{Zones: []string{"."}, Sample: 1}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.cfg.Listen = []string{"127.0.0.1:0"}
			c.cfg.QueryLogger = qlog
			benchUDPServeFast(b, c.cfg)
		})
	}
}

func benchUDPServeFast(b *testing.B, cfg Config) {
	s, err := New(cfg, &echoHandler{}, zap.NewNop(), metrics.NewSet())
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

// BenchmarkObserve measures what the top talkers and the query log add to
// one cache hit, without sockets: the nil check when both are off, the
// count of the source, the sampling draw, and the log line of a sampled
// query (JSON to io.Discard).
//
//	go test ./frontend/server -run '^$' -bench Observe -count 5 -cpu 1
func BenchmarkObserve(b *testing.B) {
	enc := zap.NewProductionEncoderConfig()
	qlog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))
	req, _ := new(dns.Msg).SetQuestion("web.default.svc.cluster.local.", dns.TypeA).Pack()
	resp := answer(nil, req)
	src := v4Key([4]byte{10, 1, 2, 3})
	for _, c := range []struct {
		name   string
		q      QueryLog
		talk   int
		sample bool // log every query (the cost of one sampled query)
	}{
		{"off", QueryLog{}, 0, false},
		{"talkers", QueryLog{}, DefaultTopTalkers, false},
		{"log=1%", QueryLog{Zones: []string{"."}, Sample: 0.01}, 0, false},
		{"talkers+log=1%", QueryLog{Zones: []string{"."}, Sample: 0.01}, DefaultTopTalkers, false},
		{"one-logged-query", QueryLog{Zones: []string{"."}, Sample: 1}, 0, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := newObserver(c.q, c.talk, qlog)
			var t *talkers
			if o != nil {
				t = o.newTalkers()
			}
			b.ReportAllocs()
			for b.Loop() {
				// As udpSocket.observed does for a hit.
				if o == nil {
					continue
				}
				sampled := o.sample()
				var start time.Time
				if sampled {
					start = time.Now()
				}
				o.note(t, t != nil, src, UDP, req, resp, answerHit, sampled, start)
			}
		})
	}
}
