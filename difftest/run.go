package difftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// queryTimeout is a stub resolver's (glibc's and musl's default: 5s).
const queryTimeout = 5 * time.Second

// runner sends lookups to a system's frontend and backend and judges each
// pair of answers.
type runner struct {
	sys    *system
	domain string

	queries, lookups, differences, aged, bothLost, caseDep atomic.Int64

	mu       sync.Mutex
	asked    map[string]bool // lower-case names sent, to either
	examples []string        // the first differences, for the report
}

func newRunner(sys *system) *runner {
	return &runner{sys: sys, domain: clusterDomain, asked: map[string]bool{}}
}

// exchange sends q to addr over UDP, or TCP.
func exchange(addr string, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	c := dns.Client{Net: "udp", Timeout: queryTimeout, UDPSize: dns.MaxMsgSize}
	if tcp {
		c.Net = "tcp"
	}
	m, _, err := c.Exchange(q, addr)
	return m, err
}

func (r *runner) differ(format string, args ...any) {
	r.differences.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.examples) < 20 {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

// ask sends q to the frontend and then to the backend, judges the answers
// and returns the frontend's, which is what the client sees.
func (r *runner) ask(q *dns.Msg) *dns.Msg {
	r.mu.Lock()
	r.asked[wireName(q)] = true
	r.mu.Unlock()
	f, b := r.pair(q, false)
	if f != nil && b != nil && (f.Truncated || b.Truncated) {
		if f.Truncated != b.Truncated {
			r.differ("%s: TC %v from the frontend, %v from the backend", qstr(q), f.Truncated, b.Truncated)
		}
		f, _ = r.pair(q, true)
	}
	return f
}

func qstr(q *dns.Msg) string {
	s := fmt.Sprintf("%s %s", q.Question[0].Name, dns.TypeToString[q.Question[0].Qtype])
	if o := q.IsEdns0(); o != nil {
		s += fmt.Sprintf(" +edns%d", o.UDPSize())
		if o.Do() {
			s += " +do"
		}
	}
	if q.CheckingDisabled {
		s += " +cd"
	}
	return s
}

// pair asks the frontend and the backend q, over UDP or TCP, and judges.
func (r *runner) pair(q *dns.Msg, tcp bool) (f, b *dns.Msg) {
	r.queries.Add(1)
	f, ferr := exchange(r.sys.frontendDNS, q.Copy(), tcp)
	b, berr := exchange(r.sys.backendDNS, q.Copy(), tcp)
	now := time.Now()
	if berr == nil {
		r.sys.hist.add(q, b, now)
	}
	switch {
	case ferr != nil && berr != nil:
		r.bothLost.Add(1)
		return nil, nil
	case ferr != nil:
		r.differ("%s: no answer from the frontend (%v); the backend:\n%s", qstr(q), ferr, b)
		return nil, b
	case berr != nil:
		r.differ("%s: no answer from the backend (%v); the frontend:\n%s", qstr(q), berr, f)
		return f, nil
	}
	if f.Truncated || b.Truncated {
		return f, b
	}
	nf, nb := normalize(f), normalize(b)
	if nf == nb {
		if ok, why := ttlsAged(f, b); !ok {
			r.differ("%s at %s: %s; the backend's last answers: %s", qstr(q), now.Format("15:04:05.000"), why, r.sys.hist.report(q))
		}
		return f, b
	}
	if r.sys.hist.aged(q, f, now) {
		r.aged.Add(1)
		return f, b
	}
	if r.caseDependent(q, f, b) {
		r.caseDep.Add(1)
		return f, b
	}
	r.differ("%s (tcp %v):\nfrontend:\n%s\nbackend:\n%s", qstr(q), tcp, f, b)
	return f, b
}

// walk runs a lookup as its client's stub resolver does, judging every
// query on the way.
func (r *runner) walk(l lookup) {
	r.lookups.Add(1)
	for _, name := range candidates(l, r.domain) {
		var answers []*dns.Msg
		for _, qt := range l.qtypes {
			answers = append(answers, r.ask(l.query(name, qt)))
		}
		if !next(l.client, answers) {
			return
		}
	}
}

// unasked returns the names that reached the spy since its reset and that
// no client asked.
func (r *runner) unasked(s *spy) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for n := range s.seen() {
		if !r.asked[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// convergence is the time from each Service's creation to its first
// correct answer, per system measured.
type convergence struct {
	mu    sync.Mutex
	times map[string][]time.Duration // system → times
	fails map[string][]string
}

func (c *convergence) add(system string, d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.times == nil {
		c.times, c.fails = map[string][]time.Duration{}, map[string][]string{}
	}
	if err != nil {
		c.fails[system] = append(c.fails[system], err.Error())
		return
	}
	c.times[system] = append(c.times[system], d)
}

// stats returns the p50 and the max of a system's times, and their count.
func (c *convergence) stats(system string) (p50, max time.Duration, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := append([]time.Duration(nil), c.times[system]...)
	if len(ts) == 0 {
		return 0, 0, 0
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[len(ts)/2], ts[len(ts)-1], len(ts)
}

// firstCorrect polls addr for svc's A record every 20ms until the answer
// holds svc's ClusterIP, and returns the time since svc's creation.
func firstCorrect(ctx context.Context, addr string, svc created) (time.Duration, error) {
	q := new(dns.Msg)
	q.SetQuestion(svc.fqdn, dns.TypeA)
	for {
		m, err := exchange(addr, q, false)
		if err == nil && m.Rcode == dns.RcodeSuccess {
			for _, rr := range m.Answer {
				if a, ok := rr.(*dns.A); ok && a.A.String() == svc.ip {
					return time.Since(svc.at), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: no correct answer from %s within %s", svc.fqdn, addr, time.Since(svc.at).Round(time.Millisecond))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// load runs workers drawing lookups from g until stop is closed.
func (r *runner) load(g *generator, seed uint64, workers int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.walk(g.next(rng))
			}
		}()
	}
	wg.Wait()
}

// caseDependent reports whether the backend answers q's name differently
// by the case of its letters (RFC 4343 §3 forbids it: CoreDNS v1.15's
// kubernetes plugin answers ns.dns.DOMAIN only when DOMAIN is spelled in
// lower case), and f is its answer for one spelling. A cache keys names
// without case (RFC 4343 §4.1), so it serves one spelling's answer to
// all.
func (r *runner) caseDependent(q, f, b *dns.Msg) bool {
	want := caseless(f)
	seen := map[string]bool{caseless(b): true}
	for _, spell := range []func(string) string{strings.ToLower, strings.ToUpper} {
		v := q.Copy()
		v.Question[0].Name = spell(v.Question[0].Name)
		a, err := exchange(r.sys.backendDNS, v, false)
		if err != nil {
			return false
		}
		seen[caseless(a)] = true
	}
	return len(seen) > 1 && seen[want]
}

// wireName is q's name as a server reads it (packed and unpacked: a
// space or a dot inside a label escaped), in lower case, as the spy
// records names.
func wireName(q *dns.Msg) string {
	name := q.Question[0].Name
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(name, buf, 0, nil, false)
	if err != nil {
		return strings.ToLower(name)
	}
	out, _, err := dns.UnpackDomainName(buf[:n], 0)
	if err != nil {
		return strings.ToLower(name)
	}
	return strings.ToLower(out)
}
