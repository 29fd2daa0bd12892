package resolver

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
)

// BenchmarkServeFastHit measures the whole hit path: parse, count, look up,
// copy and patch, with a typical Kubernetes service query over UDP.
func BenchmarkServeFastHit(b *testing.B) {
	ex := &fakeExchanger{}
	ex.set(records(b, dns.RcodeSuccess, "x. 30 IN A 10.96.0.10"))
	r, _ := newResolver(b, DefaultConfig(), ex, nil)
	req := pack(b, "kubernetes.default.svc.cluster.local.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	serve(b, r, req, server.UDP)
	dst := buf()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.ServeFast(dst, req, server.UDP); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkServeFastHitParallel is BenchmarkServeFastHit on every core.
func BenchmarkServeFastHitParallel(b *testing.B) {
	ex := &fakeExchanger{}
	ex.set(records(b, dns.RcodeSuccess, "x. 30 IN A 10.96.0.10"))
	r, _ := newResolver(b, DefaultConfig(), ex, nil)
	req := pack(b, "kubernetes.default.svc.cluster.local.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	serve(b, r, req, server.UDP)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := buf()
		for pb.Next() {
			if _, ok := r.ServeFast(dst, req, server.UDP); !ok {
				b.Fatal("miss")
			}
		}
	})
}
