package difftest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopShared()
	proctest.RemoveBuilds()
	os.Exit(code)
}

// Knobs of the run (environment, so that `go test ./...` needs none).
const (
	defaultQueries = 100000 // per Corefile shape
	workers        = 8      // concurrent lookups
	roundEvery     = 3 * time.Second
	minRounds      = 3 // cluster changes per shape, at least
	createPerRound = 3 // Services created per round; the first two asked before they exist
)

func queriesPerShape(t *testing.T) int64 {
	if v := os.Getenv("NODEDNS_DIFFTEST_QUERIES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("NODEDNS_DIFFTEST_QUERIES=%q: want a positive number", v)
		}
		return n
	}
	if testing.Short() {
		return 3000
	}
	return defaultQueries
}

// summary is the suite's last line.
func summary(q, d, u int64) string {
	return fmt.Sprintf("difftest: %d queries, %d differences, %d upstream names no client asked", q, d, u)
}

// TestDifferential is the differential suite (README.md): for each
// Corefile shape, the real backend with the chart's Corefile and the real
// frontend with the chart's flags answer the same queries while the
// cluster changes; every difference other than TTL aging, and every name
// reaching the upstream that no client asked, fails it.
func TestDifferential(t *testing.T) {
	e := sharedEnv(t)
	target := queriesPerShape(t)
	sd := seed(t)
	p := e.startPeers(t)
	conv := &convergence{}
	var totalQ, totalD, totalU int64
	defer func() {
		line := summary(totalQ, totalD, totalU)
		if path := os.Getenv("NODEDNS_DIFFTEST_SUMMARY"); path != "" {
			if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
				t.Errorf("write %s: %v", path, err)
			}
		}
		t.Log(line)
		fmt.Println(line)
	}()
	for i, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			q, d, u := e.runShape(t, sh, sd+uint64(i), target, p, conv)
			totalQ += q
			totalD += d
			totalU += u
		})
	}
	bound := 5*time.Second + watchLag + time.Second // --cluster-negative-max-ttl, the watch, the polling
	for _, sys := range []string{"nodedns", "coredns", "nodelocal"} {
		for _, kind := range []string{"asked before", "never asked"} {
			k := sys + ", " + kind
			p50, max, n := conv.stats(k)
			t.Logf("time from a Service's creation to its first correct answer, %s: p50 %s, max %s (%d Services)", k, p50.Round(time.Millisecond), max.Round(time.Millisecond), n)
			if sys == "nodedns" && max > bound {
				t.Errorf("%s: a Service was answered %s after its creation; the bound is %s", k, max, bound)
			}
		}
		for _, f := range conv.fails[sys+", asked before"] {
			t.Errorf("%s: %s", sys, f)
		}
		for _, f := range conv.fails[sys+", never asked"] {
			t.Errorf("%s: %s", sys, f)
		}
	}
}

// runShape runs one Corefile shape and returns its queries, differences
// and unasked upstream names.
func (e *env) runShape(t *testing.T, sh shape, sd uint64, target int64, p *peers, conv *convergence) (int64, int64, int64) {
	values, err := sh.values(e.spy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sys := e.startSystem(t, sh.name, values)
	// The chart's switch: shapes in which more than the kubernetes
	// plugin answers the cluster domain get neither feature.
	for _, f := range []string{"search-prefetch", "deny-below-nxdomain"} {
		if sys.on(f) == sh.shared {
			t.Errorf("the chart renders --%s=%s for shape %s (shares the cluster domain: %v)\nNOTES.txt:\n%s", f, sys.flags[f], sh.name, sh.shared, sys.notes)
		}
	}
	e.mu.Lock()
	e.hist = sys.hist
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.hist = nil
		e.mu.Unlock()
	}()
	r := newRunner(sys)
	stop := make(chan struct{})
	var loadDone sync.WaitGroup
	loadDone.Add(1)
	go func() {
		defer loadDone.Done()
		r.load(e.gen, sd, workers, stop)
	}()
	start := time.Now()
	var measures sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rounds := 0
	for r.queries.Load() < target || rounds < minRounds {
		time.Sleep(roundEvery)
		if t.Failed() || ctx.Err() != nil {
			break
		}
		n := e.nextRound()
		// Two of the round's names are asked before they exist, so that
		// their denial is cached where caches keep it.
		for k := range 2 {
			name := fmt.Sprintf("new-%d-%d.%s.svc.%s.", n, k, nsA, clusterDomain)
			q := new(dns.Msg)
			q.SetQuestion(name, dns.TypeA)
			r.ask(q)
			for _, addr := range []string{p.coredns, p.nodelocal} {
				exchange(addr, q, false)
			}
		}
		made, err := e.cluster.round(ctx, n, createPerRound, clusterDomain)
		if err != nil {
			t.Errorf("round %d: %v", n, err)
			break
		}
		rounds++
		for k, svc := range made {
			e.gen.addDynamic(strings.SplitN(svc.fqdn, ".", 2)[0])
			kind := "never asked"
			if k < 2 {
				kind = "asked before"
			}
			for sysName, addr := range map[string]string{"nodedns": sys.frontendDNS, "coredns": p.coredns, "nodelocal": p.nodelocal} {
				measures.Add(1)
				go func() {
					defer measures.Done()
					mctx, mcancel := context.WithTimeout(ctx, 40*time.Second)
					defer mcancel()
					d, err := firstCorrect(mctx, addr, svc)
					conv.add(sysName+", "+kind, d, err)
				}()
			}
		}
		e.gen.setReverse(e.cluster.reverseNames())
		t.Logf("%s: round %d, %d queries in %s", sh.name, n, r.queries.Load(), time.Since(start).Round(time.Second))
	}
	close(stop)
	loadDone.Wait()
	measures.Wait()
	// Background exchanges of the frontend (prefetch) end within a
	// second of the last query.
	time.Sleep(time.Second)
	unasked := r.unasked(e.spy)
	q, d := r.queries.Load(), r.differences.Load()
	t.Logf("%s: %d queries (%d lookups) in %s, %d differences, %d upstream names no client asked; %d answers aged across a cluster change; %d answers of the backend that depend on the name's case; %d queries unanswered by both; --search-prefetch=%s --deny-below-nxdomain=%s",
		sh.name, q, r.lookups.Load(), time.Since(start).Round(time.Second), d, len(unasked), r.aged.Load(), r.caseDep.Load(), r.bothLost.Load(), sys.flags["search-prefetch"], sys.flags["deny-below-nxdomain"])
	for _, ex := range r.examples {
		t.Errorf("%s: difference: %s", sh.name, ex)
	}
	if len(unasked) > 0 {
		t.Errorf("%s: %d names reached the upstream that no client asked: %s", sh.name, len(unasked), strings.Join(unasked[:min(len(unasked), 30)], " "))
	}
	if q < target {
		t.Errorf("%s: %d queries, fewer than %d", sh.name, q, target)
	}
	return q, d, int64(len(unasked))
}

// nextRound numbers the cluster changes across shapes.
func (e *env) nextRound() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rounds++
	return e.rounds - 1
}

// FuzzDifferential drives the same comparison from arbitrary names: each
// input is a lookup (a glibc or musl walk, or a direct query) of name for
// qtype, sent to the chart's default frontend and backend; any difference
// or unasked upstream name fails it.
func FuzzDifferential(f *testing.F) {
	for _, s := range []struct {
		name  string
		qtype uint16
		bits  uint8
	}{
		{"web", dns.TypeA, 0}, {"pod-0.db", dns.TypeAAAA, 0}, {"db-0.db", dns.TypeA, 1},
		{"_http._tcp.nosuch", dns.TypeSRV, 0}, {"_http._tcp.web", dns.TypeSRV, 1},
		{"ns.dns", dns.TypeA, 0}, {"x.ns.dns", dns.TypeA, 0}, {"WeB.Dt-A", dns.TypeA, 0},
		{"a.b.c.d.e.f", dns.TypeAAAA, 1}, {"www.example.com", dns.TypeA, 0},
		{"web.dt-a.svc.cluster.local.", dns.TypeTXT, 2}, {"dt-a.svc.cluster.local.", dns.TypeTXT, 2},
		{"legacy.cluster.local", dns.TypeA, 0}, {"\\000.web", dns.TypeA, 0},
		{"1.0.1.10.in-addr.arpa.", dns.TypePTR, 2}, {"x.example.org", dns.TypeMX, 1 | 4},
		{"nosuch.svc.cluster.local.", dns.TypeANY, 2 | 8}, {"com", dns.TypeCNAME, 0},
	} {
		f.Add(s.name, s.qtype, s.bits)
	}
	e := sharedEnv(f)
	sys := e.startSystem(f, "fuzz", mustValues(f))
	r := newRunner(sys)
	f.Fuzz(func(t *testing.T, name string, qtype uint16, bits uint8) {
		if _, ok := dns.IsDomainName(name); !ok || name == "" {
			return
		}
		switch qtype {
		case dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeMAILA, dns.TypeMAILB, dns.TypeNone:
			// Answered by the frontend itself, by design (docs/architecture.md).
			qtype = dns.TypeA
		}
		l := lookup{client: []string{glibc, musl, direct, glibc}[bits&3], name: name, ns: nsA, qtypes: []uint16{qtype}}
		if bits&4 != 0 {
			l.edns, l.do = 1232, true
		}
		l.cd = bits&8 != 0
		if bits&16 != 0 {
			l.qtypes = []uint16{dns.TypeA, dns.TypeAAAA}
		}
		before := r.differences.Load()
		r.walk(l)
		if r.differences.Load() != before {
			r.mu.Lock()
			t.Errorf("differences for %q: %s", name, strings.Join(r.examples, "\n"))
			r.examples = nil
			r.mu.Unlock()
		}
		if u := r.unasked(e.spy); len(u) > 0 {
			t.Errorf("upstream names no client asked: %v", u)
		}
	})
}

func mustValues(t testing.TB) map[string]any {
	v, err := shapes[0].values(shared.spy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
