package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// backendTTL is the TTL of every answer of the fake backend: long enough
// that no server's cache expires an entry within a run, unless the server
// itself caps TTLs (NodeLocal DNSCache caps at 30s, 5s for denials).
const backendTTL = 300

// Backend is the authoritative fake every server forwards to: UDP and TCP
// on one loopback port (dnsmasq forwards over UDP only, the others over
// TCP), and an HTTP /ready endpoint for the frontend's readiness gate.
// It runs inside the harness process, so it shares the client CPU.
type Backend struct {
	Addr     string // host:port, UDP and TCP
	ReadyURL string // http://host:port/ready, always 200

	queries atomic.Int64 // queries answered, both transports

	udp, tcp *dns.Server
	http     *http.Server
}

// StartBackend serves the fake zone on 127.0.0.1 until Close.
func StartBackend() (*Backend, error) {
	tl, pc, err := listenPair()
	if err != nil {
		return nil, fmt.Errorf("fake backend: %w", err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tl.Close()
		pc.Close()
		return nil, fmt.Errorf("fake backend ready endpoint: %w", err)
	}
	b := &Backend{Addr: tl.Addr().String(), ReadyURL: "http://" + hl.Addr().String() + "/ready"}
	h := dns.HandlerFunc(b.serveDNS)
	b.udp = &dns.Server{PacketConn: pc, Handler: h}
	b.tcp = &dns.Server{Listener: tl, Handler: h}
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("OK")) })
	b.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	for _, s := range []*dns.Server{b.udp, b.tcp} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
	}
	go func() { _ = b.http.Serve(hl) }()
	return b, nil
}

// Queries returns the number of queries answered so far.
func (b *Backend) Queries() int64 { return b.queries.Load() }

// Close stops the listeners.
func (b *Backend) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return errors.Join(b.udp.ShutdownContext(ctx), b.tcp.ShutdownContext(ctx), b.http.Shutdown(ctx))
}

func (b *Backend) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	b.queries.Add(1)
	_ = w.WriteMsg(answer(req))
}

// answer makes the fake zone's response to req: an A or AAAA record
// derived from the name, NXDOMAIN for names starting with nxPrefix, and
// NODATA for other types. Negative answers carry a SOA whose MINIMUM sets
// the negative TTL (RFC 2308 section 5).
func answer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := req.Question[0]
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: backendTTL}
	h := fnv.New32a()
	h.Write([]byte(strings.ToLower(q.Name)))
	sum := h.Sum32()
	switch {
	case strings.HasPrefix(strings.ToLower(q.Name), nxPrefix):
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa()}
	case q.Qtype == dns.TypeA:
		hdr.Rrtype = dns.TypeA
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(10, byte(sum>>16), byte(sum>>8), byte(sum))}}
	case q.Qtype == dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		ip := net.IP{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: ip}}
	default:
		m.Ns = []dns.RR{soa()}
	}
	return m
}

func soa() dns.RR {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: "cluster.local.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: backendTTL},
		Ns:      "ns.dns.cluster.local.",
		Mbox:    "hostmaster.cluster.local.",
		Serial:  1,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  backendTTL,
	}
}

// listenPair opens a TCP listener and a UDP socket on the same free
// loopback port.
func listenPair() (net.Listener, net.PacketConn, error) {
	var lastErr error
	for range 20 {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		pc, err := net.ListenPacket("udp", tl.Addr().String())
		if err != nil {
			tl.Close()
			lastErr = err // that UDP port is taken; try another number
			continue
		}
		return tl, pc, nil
	}
	return nil, nil, fmt.Errorf("no free UDP+TCP port pair: %w", lastErr)
}

// freePort returns a loopback port that is free for both UDP and TCP at
// the time of the call, for a child process to bind.
func freePort() (int, error) {
	tl, pc, err := listenPair()
	if err != nil {
		return 0, err
	}
	port := tl.Addr().(*net.TCPAddr).Port
	tl.Close()
	pc.Close()
	return port, nil
}
