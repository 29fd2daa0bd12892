package upstream

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// The tests below run the real backend (CoreDNS): the binary named by
// NODEDNS_BACKEND, else bin/nodedns-backend (`make build`, which `make test`
// runs first). The benchmarks compare the pool with a dial per query:
//
//	make build && go test ./frontend/upstream -run '^$' -bench CoreDNS

// coreDNS runs the backend binary on a free loopback port with a Corefile
// that answers every A query from the template plugin.
type coreDNS struct {
	tb   testing.TB
	bin  string
	conf string
	addr string
	cmd  *exec.Cmd
}

func startCoreDNS(tb testing.TB) *coreDNS {
	tb.Helper()
	bin := os.Getenv("NODEDNS_BACKEND")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "nodedns-backend")
	}
	if _, err := os.Stat(bin); err != nil {
		tb.Skipf("no backend binary (%v): run `make build` or set NODEDNS_BACKEND", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(tb.TempDir(), "Corefile")
	corefile := fmt.Sprintf(`.:%s {
    bind 127.0.0.1
    template IN A {
        answer "{{ .Name }} 60 IN A 10.0.0.1"
    }
}
`, port)
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		tb.Fatal(err)
	}
	c := &coreDNS{tb: tb, bin: bin, conf: conf, addr: addr}
	c.start()
	tb.Cleanup(c.stop)
	return c
}

func (c *coreDNS) start() {
	c.tb.Helper()
	c.cmd = exec.Command(c.bin, "-conf", c.conf, "-quiet")
	if err := c.cmd.Start(); err != nil {
		c.tb.Fatalf("start %s: %v", c.bin, err)
	}
	cl := &dns.Client{Net: "tcp", Timeout: 100 * time.Millisecond}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, _, err := cl.Exchange(dnstest.Query("up.example.", dns.TypeA), c.addr); err == nil {
			return
		}
	}
	c.stop()
	c.tb.Fatalf("backend on %s did not answer within 10s", c.addr)
}

func (c *coreDNS) stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.cmd = nil
}

// TestCoreDNSRestart kills the real backend under a pool with pooled
// connections and starts it again: no exchange after the restart fails.
func TestCoreDNSRestart(t *testing.T) {
	c := startCoreDNS(t)
	p, set := newPool(t, Config{Backend: c.addr})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { exchange(t, p, "w"+strconv.Itoa(i)+".example.") })
	}
	wg.Wait()
	open := metricstest.Value(t, set, "nodedns_upstream_conns_open")
	c.stop()
	c.start()
	for i := range 8 {
		if got := answeredBy(exchange(t, p, "after"+strconv.Itoa(i)+".example.")); got != "10.0.0.1" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := metricstest.Value(t, set, "nodedns_upstream_requests_total", "upstream", "backend", "result", "error"); n != 0 {
		t.Errorf("requests_total{backend,error} = %v after a restart with %v pooled connections", n, open)
	}
}

// BenchmarkCoreDNSExchange measures misses through the pool to the real
// backend, from several goroutines.
func BenchmarkCoreDNSExchange(b *testing.B) {
	c := startCoreDNS(b)
	p, _ := newPool(b, Config{Backend: c.addr})
	ctx := context.Background()
	var n int64
	var mu sync.Mutex
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		n++
		g := n
		mu.Unlock()
		qs := make([]*dns.Msg, 256)
		for i := range qs {
			qs[i] = dnstest.Query(fmt.Sprintf("svc%d.g%d.example.", i, g), dns.TypeA)
		}
		for i := 0; pb.Next(); i++ {
			if _, err := p.Exchange(ctx, qs[i%len(qs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCoreDNSDialPerQuery is the same load with a new TCP connection
// per query.
func BenchmarkCoreDNSDialPerQuery(b *testing.B) {
	c := startCoreDNS(b)
	cl := &dns.Client{Net: "tcp"}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		q := dnstest.Query("svc.example.", dns.TypeA)
		for pb.Next() {
			if _, _, err := cl.Exchange(q, c.addr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
