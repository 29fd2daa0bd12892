package scenario

import (
	"net"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// upstream stands for the resolvers outside the cluster (the node's
// resolv.conf): authoritative for gen.ExternalZone, NXDOMAIN for
// everything else, gen.FloodZone included.
type upstream struct {
	queries atomic.Int64
	udp     *dns.Server
	tcp     *dns.Server
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	u.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 300}
	switch {
	case dns.IsSubDomain(gen.ExternalZone, name) && q.Qtype == dns.TypeA:
		hdr.Rrtype = dns.TypeA
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 1)})
	case dns.IsSubDomain(gen.ExternalZone, name) && q.Qtype == dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("2001:db8::1")})
	case dns.IsSubDomain(gen.ExternalZone, name):
		m.Ns = append(m.Ns, soa(gen.ExternalZone))
	default:
		m.Rcode = dns.RcodeNameError
		zone := "."
		if dns.IsSubDomain(gen.FloodZone, name) {
			zone = gen.FloodZone
		}
		m.Ns = append(m.Ns, soa(zone))
	}
	_ = w.WriteMsg(m)
}

// soa is the zone's SOA with a negative TTL of 60s (RFC 2308 §5).
func soa(zone string) dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns: "ns." + strings.TrimPrefix(zone, "."), Mbox: "hostmaster." + strings.TrimPrefix(zone, "."), Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 60}
}

// startUpstream serves on addr:53 (UDP and TCP) inside netns.
func startUpstream(netns, addr string) (*upstream, error) {
	u := &upstream{}
	var pc net.PacketConn
	var ln net.Listener
	err := inNetns(netns).Do(func() (err error) {
		if pc, err = net.ListenPacket("udp", net.JoinHostPort(addr, "53")); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", net.JoinHostPort(addr, "53"))
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, err
	}
	u.udp = &dns.Server{PacketConn: pc, Handler: u}
	u.tcp = &dns.Server{Listener: ln, Handler: u}
	for _, s := range []*dns.Server{u.udp, u.tcp} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
	}
	return u, nil
}

func (u *upstream) Close() {
	_ = u.udp.Shutdown()
	_ = u.tcp.Shutdown()
}
