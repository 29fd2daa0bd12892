package gen

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

func TestSlowListKeepsTheSlowest(t *testing.T) {
	var l slowList
	for i := range 3 * keepSlowest {
		d := time.Duration((i*7)%(3*keepSlowest)) * time.Millisecond
		if l.admits(d) {
			l.add(Slow{Latency: d})
		}
	}
	if len(l) != keepSlowest {
		t.Fatalf("kept %d, want %d", len(l), keepSlowest)
	}
	for i, s := range l {
		if want := time.Duration(3*keepSlowest-1-i) * time.Millisecond; s.Latency != want {
			t.Fatalf("entry %d is %v, want %v (slowest first): %v", i, s.Latency, want, l)
		}
	}
	a := &Result{Latency: new(Histogram), Slowest: []Slow{{Latency: 5}, {Latency: 1}}}
	b := &Result{Latency: new(Histogram), Slowest: []Slow{{Latency: 3}}}
	if got := Merge(a, b).Slowest; len(got) != 3 || got[0].Latency != 5 || got[1].Latency != 3 || got[2].Latency != 1 {
		t.Errorf("Merge kept %v, want 5, 3, 1", got)
	}
}

// TestSlowestNamesTheSlowExchange: a run where the second search domain's
// answer comes 150 ms late lists lookups of about that latency first, the
// slow exchange and its name with them, and no lateness of the generator
// near it.
func TestSlowestNamesTheSlowExchange(t *testing.T) {
	const slowName = "svc-1.svc.cluster.local."
	z := &zone{names: map[string]bool{slowName: true}}
	z.drop = func(q dns.Question, n int) bool {
		if q.Name == slowName && q.Qtype == dns.TypeA && n == 1 {
			time.Sleep(150 * time.Millisecond)
		}
		return false
	}
	cfg := testConfig(dnstest.Start(t, z).Addr)
	cfg.Timeout = time.Second
	cfg.Mix, _ = NewMix([]Entry{{"svc-1", 1}})
	cfg.Rate, cfg.Duration, cfg.Pods = 100, time.Second, 4
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Slowest) == 0 {
		t.Fatal("no slowest lookups recorded")
	}
	s := res.Slowest[0]
	t.Logf("slowest: %+v", s)
	if s.Latency < 150*time.Millisecond || s.SlowestExchange < 150*time.Millisecond || s.SlowestName != slowName {
		t.Errorf("slowest lookup %+v: want >= 150ms, its slowest exchange >= 150ms for %s", s, slowName)
	}
	if s.Late > 100*time.Millisecond {
		t.Errorf("lookup began %v late", s.Late)
	}
	if d := time.Since(s.Due); d < 0 || d > 10*time.Second {
		t.Errorf("due %v: not wall-clock time of this run", s.Due)
	}
}
