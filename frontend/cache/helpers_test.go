package cache

import (
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// clock is an injected clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newCache(t testing.TB, cfg Config, clk *clock) *Cache {
	t.Helper()
	var now func() time.Time
	if clk != nil {
		now = clk.Now
	}
	c, err := New(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// req packs a query; edit may change it first.
func req(t testing.TB, name string, qtype uint16, edit func(*dns.Msg)) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t testing.TB, b []byte) *dnswire.Query {
	t.Helper()
	q := new(dnswire.Query)
	if err := dnswire.ParseQuery(b, q); err != nil {
		t.Fatalf("parse: %v", err)
	}
	return q
}

func rrs(t testing.TB, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		out = append(out, rr)
	}
	return out
}

// answer returns a backend response to the query in b.
func answer(t testing.TB, b []byte, rcode int, answers, ns []dns.RR) *dns.Msg {
	t.Helper()
	var q dns.Msg
	if err := q.Unpack(b); err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetRcode(&q, rcode)
	m.RecursionAvailable = true
	m.Answer, m.Ns = answers, ns
	m.SetEdns0(1232, false)
	return m
}

func unpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack %x: %v", b, err)
	}
	return m
}

func ttls(m *dns.Msg) []uint32 {
	var out []uint32
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if rr.Header().Rrtype != dns.TypeOPT {
				out = append(out, rr.Header().Ttl)
			}
		}
	}
	return out
}

func buf() []byte { return make([]byte, 0, 65535) }
