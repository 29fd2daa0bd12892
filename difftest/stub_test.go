package difftest

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestCandidates: the names glibc's and musl's stub resolvers ask for a
// lookup, in order, with kubelet's search path and ndots:5.
func TestCandidates(t *testing.T) {
	addr := []uint16{dns.TypeA, dns.TypeAAAA}
	srv := []uint16{dns.TypeSRV}
	s := func(n string) []string {
		return []string{n + ".dt-a.svc.cluster.local.", n + ".svc.cluster.local.", n + ".cluster.local."}
	}
	for _, tt := range []struct {
		client, name string
		qtypes       []uint16
		want         []string
	}{
		{glibc, "web", addr, append(s("web"), "web.")},
		{musl, "web", addr, append(s("web"), "web.")},
		{glibc, "web.", addr, []string{"web."}},
		{musl, "web.", addr, []string{"web."}},
		{glibc, "a.b.c.d.e", addr, append(s("a.b.c.d.e"), "a.b.c.d.e.")},                    // 4 dots: searched first
		{glibc, "a.b.c.d.e.f", addr, append([]string{"a.b.c.d.e.f."}, s("a.b.c.d.e.f")...)}, // 5 dots: as it is first
		{musl, "a.b.c.d.e.f", addr, []string{"a.b.c.d.e.f."}},                               // musl: only as it is
		{glibc, "_http._tcp.web", srv, append(s("_http._tcp.web"), "_http._tcp.web.")},
		{musl, "_http._tcp.web", srv, []string{"_http._tcp.web."}}, // res_search is res_query
		{direct, "web", addr, []string{"web."}},
	} {
		got := candidates(lookup{client: tt.client, name: tt.name, qtypes: tt.qtypes, ns: "dt-a"}, "cluster.local")
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s %q: %q, want %q", tt.client, tt.name, got, tt.want)
		}
	}
}

// TestNext: when each stub resolver goes on to its next candidate.
func TestNext(t *testing.T) {
	msg := func(rcode int, answers int) *dns.Msg {
		m := new(dns.Msg)
		m.Rcode = rcode
		for range answers {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeA, Class: dns.ClassINET}})
		}
		return m
	}
	nx, nodata, ok, fail, refused := msg(dns.RcodeNameError, 0), msg(dns.RcodeSuccess, 0), msg(dns.RcodeSuccess, 1), msg(dns.RcodeServerFailure, 0), msg(dns.RcodeRefused, 0)
	for _, tt := range []struct {
		name    string
		client  string
		answers []*dns.Msg
		want    bool
	}{
		{"glibc NXDOMAIN", glibc, []*dns.Msg{nx, nx}, true},
		{"glibc NODATA", glibc, []*dns.Msg{nodata, nx}, true},
		{"glibc SERVFAIL", glibc, []*dns.Msg{fail, nx}, true},
		{"glibc answer", glibc, []*dns.Msg{nx, ok}, false},
		{"glibc REFUSED", glibc, []*dns.Msg{refused, nx}, false},
		{"glibc timeout", glibc, []*dns.Msg{nil, nx}, false},
		{"musl NXDOMAIN", musl, []*dns.Msg{nx, nx}, true},
		{"musl NODATA stops", musl, []*dns.Msg{nodata, nodata}, false},
		{"musl NODATA then NXDOMAIN", musl, []*dns.Msg{nodata, nx}, true},
		{"musl SERVFAIL stops", musl, []*dns.Msg{fail, nx}, false},
		{"musl answer", musl, []*dns.Msg{ok, nodata}, false},
		{"direct", direct, []*dns.Msg{nx}, false},
	} {
		if got := next(tt.client, tt.answers); got != tt.want {
			t.Errorf("%s: next %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestNormalize: what two correct answers may differ in, and what not.
func TestNormalize(t *testing.T) {
	base := func() *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion("Web.dt-a.svc.cluster.local.", dns.TypeA)
		m.Response, m.Authoritative = true, true
		for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
			rr, _ := dns.NewRR("web.dt-a.svc.cluster.local. 30 IN A " + ip)
			m.Answer = append(m.Answer, rr)
		}
		m.SetEdns0(1232, false)
		return m
	}
	for _, tt := range []struct {
		name  string
		edit  func(m *dns.Msg)
		equal bool
	}{
		{"ID", func(m *dns.Msg) { m.Id++ }, true},
		{"RR order", func(m *dns.Msg) { m.Answer[0], m.Answer[1] = m.Answer[1], m.Answer[0] }, true},
		{"owner case", func(m *dns.Msg) { m.Answer[0].Header().Name = "WEB.dt-a.svc.cluster.local." }, true},
		{"TTL", func(m *dns.Msg) { m.Answer[0].Header().Ttl = 3 }, true},
		{"UDP size", func(m *dns.Msg) { m.IsEdns0().SetUDPSize(4096) }, true},
		{"question case", func(m *dns.Msg) { m.Question[0].Name = "web.dt-a.svc.cluster.local." }, false},
		{"rcode", func(m *dns.Msg) { m.Rcode = dns.RcodeNameError }, false},
		{"AA", func(m *dns.Msg) { m.Authoritative = false }, false},
		{"a record", func(m *dns.Msg) { m.Answer = m.Answer[:1] }, false},
		{"DO", func(m *dns.Msg) { m.IsEdns0().SetDo() }, false},
		{"no OPT", func(m *dns.Msg) { m.Extra = nil }, false},
	} {
		a, b := base(), base()
		tt.edit(b)
		if got := normalize(a) == normalize(b); got != tt.equal {
			t.Errorf("%s: equal %v, want %v\n%s\n%s", tt.name, got, tt.equal, normalize(a), normalize(b))
		}
	}
}

// TestSerialIsAChange: a backend answer with a higher SOA serial than the
// zone's last is a change of the backend's data, so the frontend's answer
// with the older serial, within its hold, is aging; without the higher
// serial (and no mutation of the suite) it is a difference.
func TestSerialIsAChange(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("in-addr.arpa.", dns.TypeNS)
	answer := func(serial uint32) *dns.Msg {
		a := new(dns.Msg)
		a.SetReply(q)
		a.Authoritative = true
		a.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "in-addr.arpa.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 5},
			Ns: "ns.dns.in-addr.arpa.", Mbox: "hostmaster.in-addr.arpa.", Serial: serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: 30}}
		return a
	}
	t0 := time.Now()
	h := newHistory(holdLimits{})
	h.add(q, answer(100), t0)
	old := answer(100)
	if h.aged(q, old, t0.Add(time.Second)) {
		t.Error("no change seen, yet the old answer counts as aged")
	}
	h.add(q, answer(130), t0.Add(500*time.Millisecond))
	if !h.aged(q, old, t0.Add(time.Second)) {
		t.Error("the backend's serial rose, yet the older answer within its hold is not aged")
	}
}
