package cache

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// BenchmarkCacheSetGet runs hits on 1000 names in parallel, with one Set
// per 64 operations.
func BenchmarkCacheSetGet(b *testing.B) {
	c := newCache(b, DefaultConfig(), nil)
	const names = 1000
	qs := make([]*dnswire.Query, names)
	resps := make([]*dns.Msg, names)
	for i := range names {
		name := fmt.Sprintf("svc%d.default.svc.cluster.local.", i)
		r := req(b, name, dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
		qs[i] = parse(b, r)
		resps[i] = answer(b, r, dns.RcodeSuccess, rrs(b, name+" 30 IN A 10.0.0.1"), nil)
		if _, err := c.Set(qs[i].Key(), resps[i]); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		dst := buf()
		i := int(seq.Add(1) * 7919)
		for pb.Next() {
			i++
			n := i % names
			if i%64 == 0 {
				_, _ = c.Set(qs[n].Key(), resps[n])
				continue
			}
			// Each goroutine owns its Query copy: Get reads the ID.
			_, _ = c.Get(dst, qs[n], 1232)
		}
	})
}

// TestBytesPerEntry measures the heap used per cached typical A answer
// (one A record, a Kubernetes service name). Run with -v to see it.
func TestBytesPerEntry(t *testing.T) {
	const n = 10000
	cfg := DefaultConfig()
	cfg.Size = n
	c := newCache(t, cfg, newClock())
	type item struct {
		key  []byte
		resp *dns.Msg
	}
	items := make([]item, n)
	for i := range n {
		name := fmt.Sprintf("svc-%d.namespace.svc.cluster.local.", i)
		r := req(t, name, dns.TypeA, nil)
		items[i] = item{append([]byte(nil), parse(t, r).Key()...), answer(t, r, dns.RcodeSuccess, rrs(t, name+" 30 IN A 10.96.0.10"), nil)}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, it := range items {
		if _, err := c.Set(it.key, it.resp); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(items)
	if p, _ := c.Len(); p != n {
		t.Fatalf("%d entries cached, want %d", p, n)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per cached A answer; %d entries: %.2f MiB", per, n, per*n/(1<<20))
	if per > 600 {
		t.Errorf("%.0f bytes per entry: 10,000 entries no longer fit comfortably in the 15 MiB budget", per)
	}
}
