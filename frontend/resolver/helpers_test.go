package resolver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeExchanger answers with fn; it records the queries it got.
type fakeExchanger struct {
	mu    sync.Mutex
	fn    func(m *dns.Msg) (*dns.Msg, error)
	calls []*dns.Msg
	got   chan *dns.Msg // if non-nil, receives each query
}

func (f *fakeExchanger) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	f.mu.Lock()
	f.calls = append(f.calls, m.Copy())
	fn := f.fn
	f.mu.Unlock()
	if f.got != nil {
		f.got <- m.Copy()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return fn(m)
}

func (f *fakeExchanger) ncalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeExchanger) set(fn func(m *dns.Msg) (*dns.Msg, error)) {
	f.mu.Lock()
	f.fn = fn
	f.mu.Unlock()
}

var errDown = errors.New("backend down")

// records answers every question with the given records (owner names
// replaced by the question's), as the backend would.
func records(t testing.TB, rcode int, ss ...string) func(m *dns.Msg) (*dns.Msg, error) {
	return func(q *dns.Msg) (*dns.Msg, error) {
		r := new(dns.Msg)
		r.SetRcode(q, rcode)
		r.RecursionAvailable = true
		for _, s := range ss {
			rr, err := dns.NewRR(s)
			if err != nil {
				t.Errorf("%q: %v", s, err)
				return nil, err
			}
			rr.Header().Name = q.Question[0].Name
			if rr.Header().Rrtype == dns.TypeSOA {
				r.Ns = append(r.Ns, rr)
			} else {
				r.Answer = append(r.Answer, rr)
			}
		}
		if o := q.IsEdns0(); o != nil {
			r.SetEdns0(1232, o.Do())
		}
		return r, nil
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newResolver(t testing.TB, cfg Config, ex Exchanger, clk *clock) (*Resolver, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var now func() time.Time
	if clk != nil {
		now = clk.Now
	}
	r, err := New(cfg, ex, reg, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, reg
}

func pack(t testing.TB, name string, qtype uint16, edit func(*dns.Msg)) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 0x4242
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack %x: %v", b, err)
	}
	return m
}

func buf() []byte { return make([]byte, 0, 65535) }
