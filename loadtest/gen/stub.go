package gen

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Outcome is how a lookup (one getaddrinfo call) ended.
type Outcome int

// Outcomes, as an application sees them.
const (
	// OK: an address came back.
	OK Outcome = iota
	// NXDomain: every candidate name was negative (NXDOMAIN or no data).
	NXDomain
	// Failed: no address, and some answer was an error (SERVFAIL,
	// REFUSED, …) or unusable: getaddrinfo's EAI_AGAIN/EAI_FAIL.
	Failed
	// Timeout: every attempt of a query went unanswered.
	Timeout
	numOutcomes
)

func (o Outcome) String() string {
	return [...]string{"ok", "nxdomain", "failed", "timeout"}[o]
}

// Candidates returns the names a stub resolver tries for name, in order
// (resolv.conf(5), glibc res_search): a name ending in a dot only as is;
// one with at least ndots dots as is first, then with each search domain;
// others with each search domain first, then as is.
func Candidates(name string, search []string, ndots int) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	out := make([]string, 0, len(search)+1)
	asIs := name + "."
	if strings.Count(name, ".") >= ndots {
		out = append(out, asIs)
	}
	for _, d := range search {
		out = append(out, name+"."+d)
	}
	if strings.Count(name, ".") < ndots {
		out = append(out, asIs)
	}
	return out
}

// stats counts the packets of one lookup.
type stats struct {
	queries   int // datagrams sent, retries included
	responses int // matching answers received
	retries   int // attempts after the first
	// slowest is the longest exchange of one candidate name (A and AAAA
	// together), and slowestName that name.
	slowest     time.Duration
	slowestName string
}

// answer is what came back for one query.
type answer int

const (
	ansNone answer = iota
	ansPositive
	ansNegative // NXDOMAIN, or NOERROR without answers
	ansError    // another rcode, or a truncated answer without records
)

// lookup resolves name as getaddrinfo(AF_UNSPEC) with glibc's defaults
// would: for each candidate, A and AAAA are sent together from one new
// socket (glibc opens a socket per lookup, so each lookup has its own
// source port); an attempt waits timeout for both answers and the next
// resends the unanswered ones. A timeout ends the lookup (glibc's
// TRY_AGAIN stops the search); negative and error answers move on to the
// next candidate.
func lookup(server netip.AddrPort, src netip.Addr, cands []string, aaaa bool, timeout time.Duration, attempts int, ids func() uint16, buf []byte) (Outcome, stats, error) {
	var st stats
	laddr := &net.UDPAddr{}
	if src.IsValid() {
		laddr.IP = src.AsSlice()
	}
	conn, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(server))
	if err != nil {
		return Failed, st, err
	}
	defer conn.Close()
	sawError := false
	for _, name := range cands {
		t0 := time.Now()
		res, err := exchangePair(conn, name, aaaa, timeout, attempts, ids, buf, &st)
		if d := time.Since(t0); d > st.slowest {
			st.slowest, st.slowestName = d, name
		}
		if err != nil {
			return Failed, st, err
		}
		switch res {
		case ansPositive:
			return OK, st, nil
		case ansNone:
			return Timeout, st, nil
		case ansError:
			sawError = true
		}
	}
	if sawError {
		return Failed, st, nil
	}
	return NXDomain, st, nil
}

type pending struct {
	wire  []byte
	id    uint16
	qtype uint16
	got   answer
}

// exchangePair sends the A (and AAAA) query for name and classifies the
// pair: positive if either has an address, none if one never came back,
// error if one was an error, negative otherwise.
func exchangePair(conn *net.UDPConn, name string, aaaa bool, timeout time.Duration, attempts int, ids func() uint16, buf []byte, st *stats) (answer, error) {
	qs := make([]pending, 0, 2)
	types := []uint16{dns.TypeA, dns.TypeAAAA}
	if !aaaa {
		types = types[:1]
	}
	for _, t := range types {
		m := new(dns.Msg)
		m.SetQuestion(name, t)
		m.Id = ids()
		wire, err := m.Pack()
		if err != nil {
			return ansError, err
		}
		qs = append(qs, pending{wire: wire, id: m.Id, qtype: t})
	}
	for attempt := 0; attempt < attempts; attempt++ {
		open := 0
		for i := range qs {
			if qs[i].got != ansNone {
				continue
			}
			open++
			if attempt > 0 {
				st.retries++
			}
			if _, err := conn.Write(qs[i].wire); err != nil && !isRefused(err) {
				return ansError, err
			}
			st.queries++
		}
		if open == 0 {
			break
		}
		deadline := time.Now().Add(timeout)
		if err := conn.SetReadDeadline(deadline); err != nil {
			return ansError, err
		}
		for open > 0 {
			n, err := conn.Read(buf)
			if err != nil {
				if isTimeout(err) {
					break
				}
				if isRefused(err) { // ICMP port unreachable: nobody listens yet
					continue
				}
				return ansError, err
			}
			for i := range qs {
				if qs[i].got == ansNone && matches(buf[:n], qs[i].wire) {
					qs[i].got = classify(buf[:n])
					st.responses++
					open--
					break
				}
			}
		}
	}
	res := ansNegative
	for _, q := range qs {
		switch q.got {
		case ansPositive:
			return ansPositive, nil
		case ansNone:
			res = ansNone
		case ansError:
			if res != ansNone {
				res = ansError
			}
		}
	}
	return res, nil
}

// matches reports whether resp answers query: same ID, QR set, and the
// same question (compared case-insensitively, as servers may echo 0x20
// case changes).
func matches(resp, query []byte) bool {
	if len(resp) < len(query) || resp[0] != query[0] || resp[1] != query[1] || resp[2]&0x80 == 0 {
		return false
	}
	// The query is header + one question; the response repeats the
	// question right after its header.
	return strings.EqualFold(string(resp[12:len(query)]), string(query[12:]))
}

// classify reads the rcode and answer count from the header.
func classify(resp []byte) answer {
	rcode := resp[3] & 0x0f
	ancount := binary.BigEndian.Uint16(resp[6:8])
	switch {
	case rcode == dns.RcodeSuccess && ancount > 0:
		return ansPositive
	case rcode == dns.RcodeNameError, rcode == dns.RcodeSuccess && resp[2]&0x02 == 0:
		return ansNegative
	default: // an error rcode, or TC without records (glibc retries over TCP; counted as a failure here)
		return ansError
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func isRefused(err error) bool {
	return errors.Is(err, errConnRefused)
}
