package bench

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestAnswer(t *testing.T) {
	qs := Queries(200)
	var nx int
	for _, q := range qs {
		req := new(dns.Msg)
		req.SetQuestion(q.Name, q.Qtype)
		resp := answer(req)
		if resp.Id != req.Id || !resp.Response {
			t.Fatalf("%s: not a response to the query", q.Name)
		}
		if resp.Rcode == dns.RcodeNameError {
			nx++
			if len(resp.Ns) != 1 || resp.Ns[0].(*dns.SOA).Minttl != backendTTL {
				t.Errorf("%s: NXDOMAIN without SOA for negative caching: %v", q.Name, resp.Ns)
			}
			continue
		}
		if len(resp.Answer) != 1 || resp.Answer[0].Header().Rrtype != q.Qtype || resp.Answer[0].Header().Ttl != backendTTL {
			t.Errorf("%s %s: answer %v", q.Name, dns.TypeToString[q.Qtype], resp.Answer)
		}
	}
	if nx != 200/nxEvery {
		t.Errorf("%d NXDOMAIN names, want %d", nx, 200/nxEvery)
	}
}

func TestQueriesDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, q := range Queries(10000) {
		if seen[q.Name] {
			t.Fatalf("duplicate name %s", q.Name)
		}
		seen[q.Name] = true
	}
}

func TestFixedRate(t *testing.T) {
	be, err := StartBackend()
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	samples, err := runFixedRate(context.Background(), be.Addr, Queries(100), 1000, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := samples.result()
	if r.Sent < 900 || r.Sent > 1000 {
		t.Errorf("sent %d queries in 1s at 1000 qps", r.Sent)
	}
	if r.Received != r.Sent || be.Queries() != r.Sent {
		t.Errorf("sent %d, received %d, backend answered %d", r.Sent, r.Received, be.Queries())
	}
	if r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.Max {
		t.Errorf("implausible percentiles %+v", r)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{0.5: 50, 0.99: 99, 0.999: 100, 1: 100, 0: 1} {
		if got := percentile(d, p); got != want {
			t.Errorf("percentile(%v) = %d, want %d", p, got, want)
		}
	}
}

func TestRoundP99(t *testing.T) {
	var s latencySamples
	for round := range 5 {
		o := latencySamples{sent: 100}
		for i := range 100 {
			d := time.Duration(i+1) * time.Microsecond
			if round == 2 {
				d *= 1000 // one round disturbed
			}
			o.lats = append(o.lats, d)
		}
		s.add(o)
	}
	r := s.result()
	if r.Sent != 500 || r.Received != 500 {
		t.Fatalf("sent/received %d/%d", r.Sent, r.Received)
	}
	if r.RoundP99 != 99*time.Microsecond {
		t.Errorf("RoundP99 = %s, want 99us", r.RoundP99)
	}
	if r.P99 < time.Millisecond {
		t.Errorf("P99 = %s, want the disturbed round to show", r.P99)
	}
}
