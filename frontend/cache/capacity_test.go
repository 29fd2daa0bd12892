package cache

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

func TestCapacityBounds(t *testing.T) {
	for _, size := range []int{1, 10, 100, 5000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Size, cfg.NegativeSize = size, size/2
			c := newCache(t, cfg, newClock())
			pc, nc := c.Capacity()
			if pc < size || pc >= size+len(c.shards) || nc < size/2 || nc >= size/2+len(c.shards) {
				t.Fatalf("capacity %d/%d for %d/%d with %d shards", pc, nc, size, size/2, len(c.shards))
			}
			for i := range 3 * size {
				b := req(t, fmt.Sprintf("n%d.example.", i), dns.TypeA, nil)
				q := parse(t, b)
				resp := answer(t, b, dns.RcodeSuccess, rrs(t, fmt.Sprintf("n%d.example. 60 IN A 192.0.2.1", i)), nil)
				if i%2 == 1 {
					resp = answer(t, b, dns.RcodeNameError, nil, rrs(t, "example. 60 IN SOA ns.example. h.example. 1 1 1 1 60"))
				}
				if _, err := c.Set(q.Key(), resp); err != nil {
					t.Fatal(err)
				}
				if p, n := c.Len(); p > pc || n > nc {
					t.Fatalf("%d/%d entries over capacity %d/%d", p, n, pc, nc)
				}
			}
		})
	}
	t.Run("max entry size", func(t *testing.T) {
		c := newCache(t, DefaultConfig(), newClock())
		b := req(t, "txt.example.", dns.TypeTXT, nil)
		long := fmt.Sprintf(`txt.example. 60 IN TXT "%s" "%s" "%s" "%s" "%s" "%s"`, bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250),
			bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250))
		e, err := c.Set(parse(t, b).Key(), answer(t, b, dns.RcodeSuccess, rrs(t, long), nil))
		if err != nil {
			t.Fatal(err)
		}
		if e.kind != noCache {
			t.Error("an answer over MaxEntrySize was cached")
		}
	})
}
