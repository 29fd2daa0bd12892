package difftest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// How two answers are compared (normalize):
//   - the header's flags, opcode and full rcode (extended bits included)
//     must be equal; the ID is the client's and is not compared;
//   - the question must be equal byte for byte, case included (0x20);
//   - each section must hold the same records, names compared without
//     case (RFC 4343 §4.1: a cache need not keep the case of the names it
//     stores), TTLs aside, in any order (the backend's loadbalance plugin
//     shuffles them);
//   - the OPT record must be present in both or neither, with the same
//     version, DO bit and options; its UDP payload size is not compared
//     (it is the sender's, hop by hop: RFC 6891 §6.2.3);
//   - each TTL of the frontend's answer must be at most the backend's
//     plus 2 s: a cache serves a record's TTL aged, and may lower it
//     (RFC 2308 §5 caps denials). The 2 s are the clocks' rounding: the
//     backend truncates the age of what it caches to whole seconds, and
//     so does the frontend, on a clock read every 100 ms
//     (frontend/cache clockTick); with ages of 0.95 s in the backend's
//     cache and 1.05 s in the frontend's, read as 0.95 s, the frontend
//     says 2 s more than the backend about the same record.
//   - a truncated answer (TC) is compared by its header only; both are
//     then asked again over TCP and compared in full.

// normalize returns m without what may differ between two correct
// answers: see above.
func normalize(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "opcode=%d rcode=%d qr=%v aa=%v tc=%v rd=%v ra=%v z=%v ad=%v cd=%v\n",
		m.Opcode, m.Rcode, m.Response, m.Authoritative, m.Truncated, m.RecursionDesired,
		m.RecursionAvailable, m.Zero, m.AuthenticatedData, m.CheckingDisabled)
	for _, q := range m.Question {
		fmt.Fprintf(&b, "q %s %d %d\n", q.Name, q.Qtype, q.Qclass)
	}
	if o := m.IsEdns0(); o != nil {
		fmt.Fprintf(&b, "opt v%d do=%v", o.Version(), o.Do())
		for _, e := range o.Option {
			fmt.Fprintf(&b, " %d:%s", e.Option(), e.String())
		}
		b.WriteByte('\n')
	}
	if m.Truncated {
		return b.String()
	}
	for i, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		fmt.Fprintf(&b, "section %d\n", i)
		b.WriteString(normSection(sec))
	}
	return b.String()
}

// normSection is a section's records without TTLs, names in lower case,
// sorted: the order of records in a section carries no meaning (RFC 2181
// §5: an RRset's records have none; the backend's loadbalance plugin
// shuffles them, and the RRsets of an ANY answer).
func normSection(rrs []dns.RR) string {
	var recs []string
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeOPT {
			recs = append(recs, normRR(rr))
		}
	}
	sort.Strings(recs)
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	return b.String()
}

// normRR is rr's text with TTL 0 and its names in lower case.
func normRR(rr dns.RR) string {
	c := dns.Copy(rr)
	h := c.Header()
	h.Ttl = 0
	h.Name = strings.ToLower(h.Name)
	switch r := c.(type) {
	case *dns.CNAME:
		r.Target = strings.ToLower(r.Target)
	case *dns.PTR:
		r.Ptr = strings.ToLower(r.Ptr)
	case *dns.SRV:
		r.Target = strings.ToLower(r.Target)
	case *dns.MX:
		r.Mx = strings.ToLower(r.Mx)
	case *dns.NS:
		r.Ns = strings.ToLower(r.Ns)
	case *dns.SOA:
		r.Ns, r.Mbox = strings.ToLower(r.Ns), strings.ToLower(r.Mbox)
	case *dns.DNAME:
		r.Target = strings.ToLower(r.Target)
	}
	return c.String()
}

// ttlSlack is what a TTL of the frontend may exceed the backend's by: the
// two truncations to whole seconds, one of them on a 100 ms clock.
const ttlSlack = 2

// ttlsAged reports whether every TTL of f is at most the TTL of the same
// record in b plus ttlSlack, f and b being equal once normalized.
func ttlsAged(f, b *dns.Msg) (bool, string) {
	for i, pair := range [][2][]dns.RR{{f.Answer, b.Answer}, {f.Ns, b.Ns}, {f.Extra, b.Extra}} {
		ft, bt := ttls(pair[0]), ttls(pair[1])
		for k, fv := range ft {
			bv := bt[k]
			for j := range min(len(fv), len(bv)) {
				if fv[j] > bv[j]+ttlSlack {
					return false, fmt.Sprintf("section %d: %s TTL %d, backend %d", i, k, fv[j], bv[j])
				}
			}
		}
	}
	return true, ""
}

// ttls maps each normalized record to its TTLs, sorted.
func ttls(rrs []dns.RR) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		k := normRR(rr)
		out[k] = append(out[k], rr.Header().Ttl)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// holdLimits are the frontend's flags that bound how long it keeps an
// answer (frontend/README.md).
type holdLimits struct {
	maxTTL, negativeMaxTTL, clusterNegativeMaxTTL, servfailTTL time.Duration
	clusterDomain                                              string // FQDN, lower case; "" none
}

// hold is how long the frontend may serve a, as an answer to q, after it
// got it: its smallest TTL within the frontend's limits (the rules of
// frontend/cache's classify, restated from RFC 2308).
func (l holdLimits) hold(q dns.Question, a *dns.Msg) time.Duration {
	sec := func(s uint32) time.Duration { return time.Duration(s) * time.Second }
	switch a.Rcode {
	case dns.RcodeServerFailure:
		return l.servfailTTL
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return 0
	}
	if a.Rcode == dns.RcodeSuccess && len(a.Answer) > 0 {
		t := l.maxTTL
		for _, rr := range a.Answer {
			t = min(t, sec(rr.Header().Ttl))
		}
		return t
	}
	for _, rr := range a.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			t := min(sec(soa.Hdr.Ttl), sec(soa.Minttl), l.negativeMaxTTL)
			if l.clusterDomain != "" && dns.IsSubDomain(l.clusterDomain, strings.ToLower(q.Name)) {
				t = min(t, l.clusterNegativeMaxTTL)
			}
			return t
		}
	}
	return 0
}

// watchLag bounds the time from a change written to the API server to the
// backend answering by it (the kubernetes plugin's watch), and the time
// between two replies of one exchange: the slack of the aging rule.
const watchLag = 2 * time.Second

// history records, per question (name without case, type, class, DO and
// CD bits), each distinct answer the backend gave, to the frontend
// (through the proxy) or to the suite, with the first and last time it
// gave it; and the times the cluster changed.
type history struct {
	limits holdLimits

	mu        sync.Mutex
	byKey     map[string][]*said
	mutations []time.Time
	recent    map[string][]string // per key, the last answers' times and TTLs (for reports)
	// serials is, per zone, the highest SOA serial the backend answered
	// with: a higher one seen at t is a change of the backend's data
	// before t, recorded as a mutation at t. The suite's own mutation
	// times miss a change the backend's watch applied more than watchLag
	// late (a loaded machine), or one the suite did not make.
	serials map[string]uint32
}

// said is one distinct answer of the backend to one question.
type said struct {
	norm        string // normalize of the answer, question case aside
	head, auth  string // header line and authority section, normalized
	first, last time.Time
	hold        time.Duration
}

func newHistory(l holdLimits) *history {
	return &history{limits: l, byKey: map[string][]*said{}, recent: map[string][]string{}, serials: map[string]uint32{}}
}

// questionKey is the cache key of a query as the frontend forms it.
func questionKey(name string, qtype, qclass uint16, do, cd bool) string {
	return fmt.Sprintf("%s/%d/%d/%v/%v", strings.ToLower(name), qtype, qclass, do, cd)
}

func msgKey(q *dns.Msg) string {
	do := false
	if o := q.IsEdns0(); o != nil {
		do = o.Do()
	}
	qq := q.Question[0]
	return questionKey(qq.Name, qq.Qtype, qq.Qclass, do, q.CheckingDisabled)
}

// caseless is normalize with the question's name in lower case, for
// answers given to different clients.
func caseless(m *dns.Msg) string {
	c := m.Copy()
	for i := range c.Question {
		c.Question[i].Name = strings.ToLower(c.Question[i].Name)
	}
	// The ID, RD and CD bits are the client's, and so is the OPT record
	// (hop by hop, RFC 6891 §6.2.3): the frontend writes the client's onto
	// a stored answer.
	c.RecursionDesired = false
	c.CheckingDisabled = false
	c.Extra = slices.DeleteFunc(c.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	return normalize(c)
}

func headLine(m *dns.Msg) string {
	return fmt.Sprintf("rcode=%d aa=%v tc=%v ra=%v ad=%v", m.Rcode, m.Authoritative, m.Truncated, m.RecursionAvailable, m.AuthenticatedData)
}

// add records the backend's answer a to query q at time t.
func (h *history) add(q, a *dns.Msg, t time.Time) {
	if len(q.Question) != 1 || len(a.Question) != 1 {
		return
	}
	k := msgKey(q)
	n := caseless(a)
	h.mu.Lock()
	defer h.mu.Unlock()
	var ttls []uint32
	for _, rr := range append(append([]dns.RR{}, a.Answer...), a.Ns...) {
		ttls = append(ttls, rr.Header().Ttl)
	}
	for _, rr := range append(append([]dns.RR{}, a.Answer...), a.Ns...) {
		soa, ok := rr.(*dns.SOA)
		if !ok {
			continue
		}
		zone := strings.ToLower(soa.Hdr.Name)
		if prev, seen := h.serials[zone]; !seen || soa.Serial > prev {
			if seen {
				h.mutations = append(h.mutations, t)
			}
			h.serials[zone] = soa.Serial
		}
	}
	r := append(h.recent[k], fmt.Sprintf("%s rcode %d TTLs %v", t.Format("15:04:05.000"), a.Rcode, ttls))
	h.recent[k] = r[max(0, len(r)-6):]
	for _, s := range h.byKey[k] {
		if s.norm == n {
			if t.After(s.last) {
				s.last = t
			}
			return
		}
	}
	h.byKey[k] = append(h.byKey[k], &said{
		norm: n, head: headLine(a), auth: normSection(a.Ns),
		first: t, last: t, hold: h.limits.hold(q.Question[0], a),
	})
}

// mutated records that the cluster changed at t.
func (h *history) mutated(t time.Time) {
	h.mu.Lock()
	h.mutations = append(h.mutations, t)
	h.mu.Unlock()
}

// changedSince reports whether the cluster changed after from (less the
// watch lag) and up to to. Called with h.mu held.
func (h *history) changedSince(from, to time.Time) bool {
	for _, m := range h.mutations {
		if !m.Before(from.Add(-watchLag)) && !m.After(to) {
			return true
		}
	}
	return false
}

// aged reports whether f, the frontend's answer to q at now, which differs
// from the backend's answer at now, is an answer the backend gave before
// the cluster changed, still within the time the frontend may keep it:
// TTL aging. That is:
//   - the backend gave f's answer to the same question at a time t with
//     now-t within its hold time (plus the lag), and the cluster changed
//     since t; or
//   - f is NXDOMAIN, and the backend gave an NXDOMAIN with the same
//     header and authority section for a name above q's (RFC 8020) under
//     the same conditions: a denial from the frontend's cache of the
//     name above, older than the change that created q's name.
//
// When the cluster did not change since, the backend's answer now is the
// one it gave then, and any difference is one.
func (h *history) aged(q, f *dns.Msg, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := func(s *said) bool {
		return now.Sub(s.last) <= s.hold+watchLag && h.changedSince(s.last, now)
	}
	fn := caseless(f)
	for _, s := range h.byKey[msgKey(q)] {
		if s.norm == fn && ok(s) {
			return true
		}
	}
	if f.Rcode != dns.RcodeNameError || len(f.Answer) != 0 {
		return false
	}
	head, auth := headLine(f), normSection(f.Ns)
	qq := q.Question[0]
	do := false
	if o := q.IsEdns0(); o != nil {
		do = o.Do()
	}
	own := h.byKey[msgKey(q)]
	labels := dns.SplitDomainName(qq.Name)
	for i := 1; i < len(labels); i++ {
		up := dns.Fqdn(strings.Join(labels[i:], "."))
		for _, s := range h.byKey[questionKey(up, qq.Qtype, qq.Qclass, do, q.CheckingDisabled)] {
			if s.head == head && s.auth == auth && ok(s) && !existedAcross(own, s.last) {
				return true
			}
		}
	}
	return false
}

// existedAcross reports whether the backend answered the name of own other
// than NXDOMAIN both before and after t (by more than the lag): the name
// existed when the name above it was denied at t, so that denial did not
// hold for it (RFC 8020 broken by the backend), and the frontend's denial
// from it is no aging but a wrong answer.
func existedAcross(own []*said, t time.Time) bool {
	for _, e := range own {
		if !strings.HasPrefix(e.head, "rcode=3 ") && e.first.Before(t.Add(-watchLag)) && e.last.After(t.Add(watchLag)) {
			return true
		}
	}
	return false
}

// report returns the last answers the backend gave for q's question.
func (h *history) report(q *dns.Msg) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.recent[msgKey(q)], "; ")
}
