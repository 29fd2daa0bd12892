package upstream

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// BenchmarkExchange measures a miss over loopback TCP to an in-process
// backend: pooled connection, no coalescing (distinct names).
func BenchmarkExchange(b *testing.B) {
	srv := dnstest.Start(b, &backend{ip: net.IPv4(10, 0, 0, 1)})
	p, _ := newPool(b, Config{Backend: srv.Addr})
	qs := make([]*dns.Msg, 1024)
	for i := range qs {
		qs[i] = dnstest.Query("svc"+strconv.Itoa(i)+".example.", dns.TypeA)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := p.Exchange(ctx, qs[i%len(qs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExchangeParallel runs misses from several goroutines, each on
// its own pooled connection.
func BenchmarkExchangeParallel(b *testing.B) {
	srv := dnstest.Start(b, &backend{ip: net.IPv4(10, 0, 0, 1)})
	p, _ := newPool(b, Config{Backend: srv.Addr})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		qs := make([]*dns.Msg, 256)
		for i := range qs {
			qs[i] = dnstest.Query("svc"+strconv.Itoa(i)+"."+strconv.Itoa(rand.IntN(1<<30))+".example.", dns.TypeA)
		}
		for i := 0; pb.Next(); i++ {
			if _, err := p.Exchange(ctx, qs[i%len(qs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDialPerQuery is the baseline the pool saves: a new TCP
// connection for every miss (dns.Client over TCP).
func BenchmarkDialPerQuery(b *testing.B) {
	srv := dnstest.Start(b, &backend{ip: net.IPv4(10, 0, 0, 1)})
	c := &dns.Client{Net: "tcp"}
	q := dnstest.Query("svc.example.", dns.TypeA)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Exchange(q, srv.Addr); err != nil {
			b.Fatal(err)
		}
	}
}
