package server

import (
	"fmt"
	"time"

	"testing"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestDomainOf(t *testing.T) {
	for _, c := range []struct{ name, cluster, want string }{
		{"slow1.hang.example", "", "hang.example"},
		{"a.b.c.example.co.uk", "", "example.co.uk"},
		{"www.google.com", "cluster.local", "google.com"},
		{"com", "", "com"},
		{"", "", ""},
		{"4.3.2.1.in-addr.arpa", "", "1.in-addr.arpa"},
		{"web.default.svc.cluster.local", "cluster.local", "default.svc.cluster.local"},
		{"_http._tcp.web.prod.svc.cluster.local", "cluster.local", "prod.svc.cluster.local"},
		{"www.google.com.default.svc.cluster.local", "cluster.local", "default.svc.cluster.local"},
		{"1-2-3-4.kube-system.pod.cluster.local", "cluster.local", "kube-system.pod.cluster.local"},
		{"default.svc.cluster.local", "cluster.local", "default.svc.cluster.local"},
		{"svc.cluster.local", "cluster.local", "svc.cluster.local"},
		{"ns.dns.cluster.local", "cluster.local", "dns.cluster.local"},
		{"cluster.local", "cluster.local", "cluster.local"},
		{"xcluster.local", "cluster.local", "xcluster.local"},
	} {
		if got := domainOf(c.name, c.cluster); got != c.want {
			t.Errorf("domainOf(%q, %q) = %q, want %q", c.name, c.cluster, got, c.want)
		}
	}
}

func TestDomainKey(t *testing.T) {
	tbl := newDomainTable()
	key := func(name string) domKey {
		b, err := (&dns.Msg{Question: []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
		if err != nil {
			t.Fatal(err)
		}
		k, _ := tbl.key(b, "cluster.local")
		return k
	}
	if key("a.Hang.EXAMPLE.").dom != key("b.hang.example.").dom {
		t.Error("two names of one registrable domain, in any case, have different domains")
	}
	if key("a.Hang.EXAMPLE.") != key("a.hang.example.") {
		t.Error("one question in two cases has two keys")
	}
	if key("a.hang.example.") == key("b.hang.example.") {
		t.Error("two names share a question key")
	}
	if key("a.hang.example.").dom == key("a.other.example.").dom {
		t.Error("two registrable domains share a key")
	}
	if key("x.default.svc.cluster.local.").dom == key("x.prod.svc.cluster.local.").dom {
		t.Error("two namespaces share a key")
	}
	for _, bad := range [][]byte{nil, make([]byte, headerLen), {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, 'a'}} {
		if k, _ := tbl.key(bad, ""); k != (domKey{}) {
			t.Errorf("key(%v) = %v, want none (no question)", bad, k)
		}
	}
	req, _ := (&dns.Msg{Question: []dns.Question{{Name: "www.example.co.uk.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
	// publicsuffix.PublicSuffix first tries the name as an IP address,
	// whose error is the one allocation: a miss costs far more elsewhere.
	if n := testing.AllocsPerRun(100, func() { tbl.key(req, "cluster.local") }); n > 1 {
		t.Errorf("key allocates %v times per miss, want at most 1", n)
	}
}

func TestDomainTable(t *testing.T) {
	tbl := newDomainTable()
	q := func(i uint64) domKey { return domKey{dom: 42, q: i} }
	for i := range uint64(3) {
		if !tbl.take(q(i), 3) {
			t.Fatal("refused under the share")
		}
	}
	if tbl.take(q(3), 3) {
		t.Error("a fourth question admitted past a share of 3")
	}
	for range 10 {
		if !tbl.take(q(1), 3) {
			t.Fatal("a question already in flight refused: it adds no exchange")
		}
	}
	if !tbl.take(domKey{}, 0) {
		t.Error("no domain (zero key) refused")
	}
	for range 10 {
		tbl.give(q(1))
	}
	if n := tbl.held(q(0)); n != 3 {
		t.Errorf("%d questions held after the joiners left, want 3", n)
	}
	for i := range uint64(3) {
		tbl.give(q(i))
	}
	tbl.give(q(0)) // one too many: ignored
	if n := tbl.held(q(0)); n != 0 {
		t.Errorf("held %d after giving all back", n)
	}
	if !tbl.take(q(9), 1) {
		t.Error("refused after giving all back")
	}
}

// TestDomainShare: a client's misses under one domain stop at the
// domain's share (counted as inflight_domain) while its misses of other
// domains are still admitted, and a released slot is taken again.
func TestDomainShare(t *testing.T) {
	s, set := startServer(t, Config{MaxInflight: 40, MaxInflightPerSource: 40, MaxInflightPerDomain: 3}, &fakeHandler{})
	src := v4Key([4]byte{127, 0, 0, 2})
	q := func(name string) []byte {
		b, _ := (&dns.Msg{Question: []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
		return b
	}
	var doms []domKey
	for i := range 3 {
		d, ok := s.acquire(src, q(fmt.Sprintf("n%d.slow.example.", i)))
		if !ok {
			t.Fatalf("miss %d of slow.example refused under its share", i)
		}
		doms = append(doms, d)
	}
	if _, ok := s.acquire(src, q("n3.SLOW.example.")); ok {
		t.Error("a fourth miss of slow.example admitted past a share of 3")
	}
	if got := metricstest.Value(t, set, refusedSeries("inflight_domain")); got != 1 {
		t.Errorf("refused inflight_domain = %v, want 1", got)
	}
	d, ok := s.acquire(src, q("www.other.example."))
	if !ok {
		t.Fatal("a miss of another domain from the same client refused")
	}
	s.release(src, d)
	s.release(src, doms[0])
	if _, ok := s.acquire(src, q("n4.slow.example.")); !ok {
		t.Error("slow.example refused after one of its misses ended")
	}
	if n := s.sources.held(src).misses; n != 3 {
		t.Errorf("client holds %d misses, want 3 (refusals give back the client's slot)", n)
	}
	// The same question again and again joins the one in flight.
	for range 5 {
		if _, ok := s.acquire(src, q("n4.slow.example.")); !ok {
			t.Fatal("a question already in flight refused for its domain's share")
		}
	}
}

// TestDomainShareSparesFewMisses: past a domain's share, taken by one
// client's flood of new names, another client's lookup under that domain
// (up to minShare misses, A and AAAA) is still admitted and given back on
// release; its next miss past minShare, and the flooder's, are refused.
func TestDomainShareSparesFewMisses(t *testing.T) {
	s, _ := startServer(t, Config{MaxInflight: 40, MaxInflightPerSource: 40, MaxInflightPerDomain: 3}, &fakeHandler{})
	q := func(name string) []byte {
		b, _ := (&dns.Msg{Question: []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
		return b
	}
	flooder, pod := v4Key([4]byte{10, 0, 0, 1}), v4Key([4]byte{10, 0, 0, 2})
	for i := range 3 {
		if _, ok := s.acquire(flooder, q(fmt.Sprintf("f%d.flood.example.", i))); !ok {
			t.Fatalf("flood miss %d refused under the share", i)
		}
	}
	if _, ok := s.acquire(flooder, q("f3.flood.example.")); ok {
		t.Error("the flooder's fourth new name admitted past the share of 3")
	}
	var doms []domKey
	for i := range minShare {
		d, ok := s.acquire(pod, q(fmt.Sprintf("p%d.flood.example.", i)))
		if !ok {
			t.Fatalf("the other client's miss %d under the flooded domain refused; it holds %d", i, i)
		}
		doms = append(doms, d)
	}
	if _, ok := s.acquire(pod, q("p9.flood.example.")); ok {
		t.Errorf("the other client's miss past minShare (%d) admitted past the share", minShare)
	}
	if n := s.domains.held(doms[0]); n != 3+minShare {
		t.Errorf("domain holds %d questions, want %d", n, 3+minShare)
	}
	for _, d := range doms {
		s.release(pod, d)
	}
	if n := s.domains.held(doms[0]); n != 3 {
		t.Errorf("domain holds %d questions after the release, want 3", n)
	}
}

// TestDomainShareStartWindow: in the first shedArmAfter after the start,
// a cold cache's backlog of distinct names in one namespace of the cluster
// domain is admitted past the domain's share, while a domain outside it
// keeps its share; past the window the namespace has its share again.
func TestDomainShareStartWindow(t *testing.T) {
	q := func(name string) []byte {
		b, _ := (&dns.Msg{Question: []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
		return b
	}
	src := v4Key([4]byte{127, 0, 0, 2})
	for _, c := range []struct {
		name     string
		armAfter time.Duration
		admitted int // of 6 distinct names in team-a's namespace
	}{{"in the start window", 0, 6}, {"past it", time.Nanosecond, 3}} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := startServer(t, Config{MaxInflight: 40, MaxInflightPerSource: 40, MaxInflightPerDomain: 3,
				ClusterDomain: "cluster.local", shedArmAfter: c.armAfter}, &fakeHandler{})
			time.Sleep(time.Millisecond)
			admitted := 0
			for i := range 6 {
				if _, ok := s.acquire(src, q(fmt.Sprintf("n%d.example.net.team-a.svc.cluster.local.", i))); ok {
					admitted++
				}
			}
			if admitted != c.admitted {
				t.Errorf("%d of 6 distinct names under team-a.svc admitted, want %d", admitted, c.admitted)
			}
			outside := 0
			for i := range 6 {
				if _, ok := s.acquire(src, q(fmt.Sprintf("n%d.slow.example.", i))); ok {
					outside++
				}
			}
			if outside != 3 {
				t.Errorf("%d of 6 distinct names under slow.example admitted, want its share of 3", outside)
			}
		})
	}
}

// TestSharedSourceShare: the node's own addresses (127.0.0.1 here, and
// the listen address) may hold half of MaxInflight, a pod's address its
// per-source share.
func TestSharedSourceShare(t *testing.T) {
	s, _ := startServer(t, Config{MaxInflight: 40, MaxInflightPerSource: 5}, &fakeHandler{})
	for _, c := range []struct {
		ip   [4]byte
		want int
	}{{[4]byte{127, 0, 0, 1}, 20}, {[4]byte{127, 0, 0, 2}, 5}} {
		n := 0
		for admit(s, v4Key(c.ip)) {
			n++
		}
		if n != c.want {
			t.Errorf("%v held %d misses, want %d", c.ip, n, c.want)
		}
	}
}
