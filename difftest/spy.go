package difftest

import (
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// spy is the stub upstream the backend forwards to (the node's resolvers):
// it records every name that reaches it and answers from fixed rules, so
// that the backend's answers for names outside the cluster are the same
// whenever they are asked.
//
// Rules (lower-case names):
//   - example.com and names under it: A 192.0.2.1, AAAA 2001:db8::1, TXT,
//     MX; other types NODATA. TTL 300.
//   - example.net and names under it: NODATA for every type.
//   - legacy.cluster.local, corp.example and names under them (the stub
//     domains of the Corefile shapes): A 192.0.2.53, other types NODATA.
//   - everything else: NXDOMAIN, with the SOA of the zone "." (MINIMUM 60).
type spy struct {
	udp, tcp *dns.Server
	Addr     string

	mu    sync.Mutex
	names map[string]int // lower-case name → queries seen since reset
	probe bool           // the backend's loop probe (HINFO) was seen
}

// startSpy starts a spy on a free loopback port, UDP and TCP. A port free
// for UDP may be taken for TCP (other tests run beside this one): then it
// tries another.
func startSpy() (*spy, error) {
	var pc net.PacketConn
	var l net.Listener
	var addr string
	for attempt := 0; ; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		addr = pc.LocalAddr().String()
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		pc.Close()
		if attempt == 20 {
			return nil, err
		}
	}
	s := &spy{Addr: addr, names: map[string]int{}}
	s.udp = &dns.Server{PacketConn: pc, Handler: s}
	s.tcp = &dns.Server{Listener: l, Handler: s}
	go s.udp.ActivateAndServe()
	go s.tcp.ActivateAndServe()
	return s, nil
}

// Close stops both listeners.
func (s *spy) Close() {
	s.udp.Shutdown()
	s.tcp.Shutdown()
}

// reset forgets the names seen so far.
func (s *spy) reset() {
	s.mu.Lock()
	s.names = map[string]int{}
	s.mu.Unlock()
}

// waitProbe waits until the backend's loop plugin has sent its start-up
// probe (a HINFO query for a random name, which the backend sends itself
// and no client asks), so that reset can forget it.
func (s *spy) waitProbe(timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		ok := s.probe
		s.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// seen returns the names recorded since the last reset.
func (s *spy) seen() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.names))
	for k, v := range s.names {
		out[k] = v
	}
	return out
}

var spySOA = &dns.SOA{
	Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
	Ns:  "a.root-servers.net.", Mbox: "nstld.verisign-grs.com.",
	Serial: 2026120300, Refresh: 1800, Retry: 900, Expire: 604800, Minttl: 60,
}

// ServeDNS answers by the rules of spy.
func (s *spy) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(1232, o.Do())
	}
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	s.mu.Lock()
	s.names[name]++
	if q.Qtype == dns.TypeHINFO {
		s.probe = true
	}
	s.mu.Unlock()
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 300}
	}
	var rrs []dns.RR
	switch {
	case dns.IsSubDomain("example.com.", name):
		all := []dns.RR{
			&dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(192, 0, 2, 1)},
			&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP("2001:db8::1")},
			&dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{"spy"}},
			&dns.MX{Hdr: hdr(dns.TypeMX), Preference: 10, Mx: "mail.example.com."},
		}
		for _, rr := range all {
			if q.Qtype == dns.TypeANY || rr.Header().Rrtype == q.Qtype {
				rrs = append(rrs, rr)
			}
		}
	case dns.IsSubDomain("example.net.", name):
	case dns.IsSubDomain("legacy.cluster.local.", name), dns.IsSubDomain("corp.example.", name):
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(192, 0, 2, 53)})
		}
	default:
		m.Rcode = dns.RcodeNameError
	}
	m.Answer = rrs
	if len(rrs) == 0 {
		m.Ns = []dns.RR{dns.Copy(spySOA)}
	}
	w.WriteMsg(m)
}

// armProbe forgets a loop probe seen before, for the next backend.
func (s *spy) armProbe() {
	s.mu.Lock()
	s.probe = false
	s.mu.Unlock()
}
