package cache

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// TestConcurrentUse runs lookups, stores, stale reads and prefetch
// bookkeeping on a few keys from several goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	clk := newClock()
	cfg := DefaultConfig()
	cfg.Size, cfg.NegativeSize = 32, 32
	c := newCache(t, cfg, clk)
	type kv struct {
		q    *dnswire.Query
		resp *dns.Msg
	}
	var kvs []kv
	for i := range 64 {
		name := fmt.Sprintf("c%d.example.", i)
		b := req(t, name, dns.TypeA, nil)
		kvs = append(kvs, kv{parse(t, b), answer(t, b, dns.RcodeSuccess, rrs(t, name+" 5 IN A 192.0.2.1"), nil)})
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			dst := buf()
			for i := range 2000 {
				it := kvs[(i*7+g)%len(kvs)]
				q := *it.q // Write reads the query; each goroutine has its own
				switch i % 5 {
				case 0:
					_, _ = c.Set(q.Key(), it.resp)
				case 1:
					_, _, _ = c.GetStale(dst, &q, 512)
				case 2:
					c.RefreshFailed(q.Key())
				case 3:
					c.PrefetchDone(q.Key())
				default:
					_, _ = c.Get(dst, &q, 512)
				}
				if g == 0 && i%100 == 0 {
					clk.Advance(time.Second)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if p, n := c.Len(); p > cfg.Size || n > cfg.NegativeSize {
		t.Errorf("%d/%d entries over capacity", p, n)
	}
}
