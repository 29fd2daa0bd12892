package testbed

import (
	"context"
	"os"
	"runtime"

	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// StubDNSIP is where the stub upstream DNS server listens (port 53, UDP and
// TCP), in the control-plane namespace: the nameserver of every real node's
// resolv.conf, so that names outside the cluster resolve (or fail) at once
// instead of waiting on an unreachable upstream (REALNODE pitfall 10).
const StubDNSIP = NodeGateway

// StubHangDomain is a domain whose servers hang: the stub upstream never
// answers a name under it, as an external domain whose nameservers are
// down, so that lookups of it hold the backend's forward for its whole
// timeout.
const StubHangDomain = "hang.stub.test."

// stubDNS answers A queries for the names given to SetStubRecord
// (wildcards "*.PARENT" included), for the names directly under the zones
// given to SetStubWideZone, and NXDOMAIN for every other name (RFC 1035
// §4.1.1), authoritatively; it never answers names under StubHangDomain.
type stubDNS struct {
	servers []*dns.Server

	mu      sync.Mutex        // guards records and wide
	records map[string]net.IP // lower-case FQDN → address
	wide    map[string]int    // lower-case zone FQDN → A records of each name under it
}

// SetStubRecord makes the stub upstream answer name (any case, with or
// without the final dot) with an A record for ip; "*.DOMAIN" answers every
// name one label under DOMAIN that has no record of its own (a wildcard,
// RFC 4592, for names of that one level only). It starts the stub in the
// control-plane namespace on first use; AddRealNode starts it too.
func (tb *Testbed) SetStubRecord(name string, ip net.IP) error {
	s, err := tb.ensureStubDNS()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.records[strings.ToLower(dns.Fqdn(name))] = ip.To4()
	s.mu.Unlock()
	return nil
}

// SetStubWideZone makes the stub upstream answer an A query for any name
// one label under zone (LABEL.zone) with records A records, of addresses
// in 198.18.0.0/15 (RFC 2544, benchmarking: never a destination). Each
// name is an answer of about 16 bytes per record that a cache holds: a
// test floods a cache with such names to fill its memory.
func (tb *Testbed) SetStubWideZone(zone string, records int) error {
	s, err := tb.ensureStubDNS()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.wide[strings.ToLower(dns.Fqdn(zone))] = records
	s.mu.Unlock()
	return nil
}

func (tb *Testbed) ensureStubDNS() (*stubDNS, error) {
	if _, err := tb.ensureNetwork(context.Background()); err != nil {
		return nil, err
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.stubDNS != nil {
		return tb.stubDNS, nil
	}
	s := &stubDNS{records: map[string]net.IP{}, wide: map[string]int{}}
	addr := net.JoinHostPort(StubDNSIP, "53")
	pc, err := listenPacketInNetns(tb.network.netns, addr)
	if err != nil {
		return nil, fmt.Errorf("stub DNS: %w", err)
	}
	ln, err := listenInNetns(tb.network.netns, addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("stub DNS: %w", err)
	}
	h := dns.HandlerFunc(s.serve)
	s.servers = []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}}
	for _, srv := range s.servers {
		go func() { _ = srv.ActivateAndServe() }()
	}
	tb.stubDNS = s
	return s, nil
}

func (s *stubDNS) serve(w dns.ResponseWriter, r *dns.Msg) {
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
	if dns.IsSubDomain(StubHangDomain, name) {
		return // never answered
	}
	s.mu.Lock()
	ip, ok := s.records[name]
	wide := 0
	if _, parent, cut := strings.Cut(name, "."); cut && !ok {
		if ip, ok = s.records["*."+parent]; !ok {
			wide, ok = s.wide[parent]
		}
	}
	s.mu.Unlock()
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA && wide > 0:
		for i := range wide {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A: net.IPv4(198, 18, byte(i>>8), byte(i))})
		}
		m.Compress = true
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize // RFC 1035 §4.2.1, or the client's EDNS size (RFC 6891 §6.2.5)
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
	case q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: ip}}
	} // other types of a known name: NODATA (RFC 2308 §2.2)
	_ = w.WriteMsg(m)
}

func (s *stubDNS) close() error {
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.Shutdown())
	}
	return errors.Join(errs...)
}

// listenPacketInNetns opens a UDP socket inside the named network namespace
// (see listenInNetns).
func listenPacketInNetns(netns, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNetns(netns, func() error {
		var err error
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on udp %s in network namespace %s: %w", addr, netns, err)
	}
	return pc, nil
}

// inNetns runs f on a locked OS thread switched into netns, then back.
func inNetns(netns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + netns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		} // else: the goroutine exits still locked, and Go discards the thread
		ch <- ferr
	}()
	return <-ch
}
