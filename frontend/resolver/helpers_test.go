package resolver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"

	sharedmetrics "github.com/nodedns/nodedns/shared/metrics"
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

func newResolver(t testing.TB, cfg Config, ex Exchanger, clk *clock) (*Resolver, *vm.Set) {
	t.Helper()
	set := sharedmetrics.NewSet()
	var now func() time.Time
	if clk != nil {
		now = clk.Now
	}
	r, err := New(cfg, ex, set, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, set
}

// families returns the type of each family in set's exposition, by its
// "# TYPE" line; a family typed twice (which Prometheus rejects) fails the
// test.
func families(t testing.TB, set *vm.Set) map[string]string {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	out := map[string]string{}
	for line := range strings.Lines(b.String()) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "# TYPE ")
		if !ok {
			continue
		}
		family, typ, _ := strings.Cut(rest, " ")
		if _, dup := out[family]; dup {
			t.Errorf("family %s typed twice", family)
		}
		out[family] = typ
	}
	return out
}

// familyOf returns the family of a series name as Values spells it, and
// its label names in order, without the le label of a histogram bucket.
func familyOf(t testing.TB, types map[string]string, series string) (string, []string) {
	t.Helper()
	name, labels, _ := strings.Cut(series, "{")
	family := name
	if _, ok := types[name]; !ok {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && types[base] == "histogram" {
				family = base
			}
		}
	}
	var names []string
	for labels != "" && labels != "}" {
		k, rest, ok := strings.Cut(labels, `="`)
		if !ok {
			t.Fatalf("series %s: bad labels", series)
		}
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' {
				i++
			}
		}
		if i >= len(rest) {
			t.Fatalf("series %s: unterminated label value", series)
		}
		labels = strings.TrimPrefix(rest[i+1:], ",")
		if !(k == "le" && family != name) {
			names = append(names, k)
		}
	}
	return family, names
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
