package server

import (
	"errors"
	"fmt"
	"github.com/nodedns/nodedns/frontend/srcpolicy"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Defaults for the zero values of Config.
const (
	// DefaultBatchSize is how many datagrams one recvmmsg reads at most. 64
	// amortises the syscall well past the point of diminishing returns while
	// keeping each socket's read buffers (BatchSize*maxUDPRequest) at 77 KiB.
	DefaultBatchSize = 64
	// DefaultMaxInflight bounds concurrent misses: at a backend round trip
	// of 1ms it still passes two million misses a second, and it stops a
	// dead backend from piling up goroutines without limit.
	DefaultMaxInflight = 2000
	// DefaultMaxTCPConns bounds open TCP connections; TCP is rare for stub
	// resolvers (truncated answers, zone transfers are not served).
	DefaultMaxTCPConns = 1000
	// DefaultMaxUDPSockets caps the default number of UDP sockets per
	// address. Each socket costs about 0.25 MiB of buffers (a batch of
	// requests, its answers' arena and a scratch message) whether or not
	// traffic comes, and one socket's reader answers about 200,000 cached
	// queries per CPU second (docs/performance.md): four carry several
	// times what a node's pods ask of their DNS cache, on any node size.
	// Without the cap a 64-CPU node would hold 64 per address, about 16
	// MiB per address for no throughput it needs.
	DefaultMaxUDPSockets = 4
	// DefaultReadBuffer is each UDP socket's receive buffer (SO_RCVBUF): a
	// query costs about 1 KiB of it (the kernel counts the whole buffer a
	// datagram sits in), so 4 MiB absorbs a burst of some 4000 queries per
	// socket while its reader is descheduled. The kernel caps it at
	// net.core.rmem_max.
	DefaultReadBuffer = 4 << 20
	// DefaultTCPIdleTimeout is how long a TCP connection may stay silent
	// while fewer than half of MaxTCPConns are open (RFC 7766 section
	// 6.2.3 suggests the order of seconds); see tcpIdleTimeout for less.
	DefaultTCPIdleTimeout = 10 * time.Second
	// DefaultSourceShare is the fraction (1/DefaultSourceShare) of
	// MaxInflight and of MaxTCPConns that one client address may hold. One
	// pod can then use the node's DNS hard (250 misses in flight pass
	// 250,000 misses a second at a 1ms backend round trip, and 2,500 a
	// second of names that take 100ms upstream), while a pod that sends
	// names that hang upstream, or holds connections open, leaves 7/8 of
	// each budget to everybody else: it takes eight such pods at once to
	// exhaust one. Stub resolvers send one query, or a handful, at a time.
	DefaultSourceShare = 8
	// DefaultDomainShare is the fraction (1/DefaultDomainShare) of
	// MaxInflight that the misses under one domain may hold (domains.go):
	// half a client's share, so that a client flooding one slow domain
	// keeps the other half of its own share for every other domain. 125
	// of 2000 still pass 125,000 misses a second of one domain at a 1ms
	// round trip, and 1,250 of a domain that takes 100ms.
	DefaultDomainShare = 2 * DefaultSourceShare
	// DefaultShedDelay is the queue delay past which misses are shed
	// (Config.ShedDelay): far below any stub resolver's timeout, and
	// above what a busy node's scheduling adds for a moment (a standing
	// queue must last 100ms).
	DefaultShedDelay = 5 * time.Millisecond
)

// minTCPIdleTimeout is the shortest idle timeout a busy server gives a
// connection: enough for a client to read an answer and send its next
// pipelined query over a loaded link (RFC 7766 section 6.2.3 lets a
// server close idle connections sooner when it is short of them).
const minTCPIdleTimeout = 200 * time.Millisecond

// maxTCPRequest is the largest TCP message read as a query: the same
// bound as a datagram (maxUDPRequest). A query is one question and an
// OPT record, a few hundred bytes even padded (RFC 8467 pads queries to
// a multiple of 128 octets); the retry over TCP after a truncated answer
// is the very query that fit in a datagram. A longer message is counted
// and its connection closed unread, so that no connection ever makes the
// server hold more than this per read.
const maxTCPRequest = maxUDPRequest

// maxUDPRequest is the largest datagram read as a query. A query is one
// question and an OPT record: a few hundred bytes even with a cookie and
// RFC 8467 padding. A bigger datagram is counted and dropped (MSG_TRUNC).
// The read buffers of a socket take BatchSize times this (77 KiB).
const maxUDPRequest = 1232

// maxMessage is the largest DNS message (RFC 1035 section 4.2.2: the TCP
// length prefix is 16 bits) and the capacity of every response buffer.
const maxMessage = 65535

// Config configures a Server. The zero value of each field selects its default.
type Config struct {
	// Listen lists the host:port addresses served over both UDP and TCP.
	// IPv4 and IPv6 literals are accepted; at least one is required.
	Listen []string

	// UDPSockets is the number of SO_REUSEPORT UDP sockets bound per
	// address, each with its own reader goroutine, so that the kernel
	// spreads queries over several cores. Default: runtime.GOMAXPROCS(0),
	// at most DefaultMaxUDPSockets.
	UDPSockets int

	// BatchSize is the number of datagrams read by one recvmmsg and
	// answered by one sendmmsg. Default: DefaultBatchSize.
	BatchSize int

	// ReadBuffer is the receive buffer of each UDP socket, in bytes.
	// Default: DefaultReadBuffer.
	ReadBuffer int

	// MaxInflight bounds the misses (ServeSlow calls) running at once over
	// all sockets; queries past it are answered by Handler.Overloaded.
	// Default: DefaultMaxInflight.
	MaxInflight int

	// MaxInflightPerSource bounds the misses of one client address in
	// flight at once; its queries past it are answered by
	// Handler.Overloaded, as past MaxInflight. Default: MaxInflight /
	// DefaultSourceShare (250), at least 1.
	MaxInflightPerSource int

	// MaxInflightPerDomain bounds the distinct questions in flight under
	// one domain (its registrable domain, or its namespace in
	// ClusterDomain: domains.go), whoever sent them; a miss of a new
	// question under it past that is answered by Handler.Overloaded,
	// one of a question in flight is not (it joins that exchange). Default: MaxInflight /
	// DefaultDomainShare (125), at least 1. Not for names in
	// ClusterDomain in the first 5s after the start (shedArmAfter): a
	// restart's backlog into a cold cache asks more distinct names in
	// the pods' namespaces than that, none of them slow.
	MaxInflightPerDomain int

	// ClusterDomain is the cluster's DNS domain (kubelet's
	// --cluster-domain), whose names are grouped by namespace for
	// MaxInflightPerDomain. Empty: none.
	ClusterDomain string

	// Sources is who may ask (--allow-networks): a UDP query from another
	// source is answered REFUSED (an answer no larger than the query, so
	// that nobody is reflected a bigger one), a TCP connection is closed,
	// both counted in nodedns_server_denied_total. Nil: everybody.
	Sources *srcpolicy.Policy

	// ShedDelay is the queue delay that makes misses be shed: when, for
	// 100ms, every batch the UDP readers read had waited longer than this
	// in its socket's queue, and every 25ms window started at least 16
	// misses per P (640 a second), the limit on misses in flight drops
	// below MaxInflight and misses past it are answered by
	// Handler.Overloaded; it rises again while the queue is under half of
	// this (shed.go). Not in the first 5s after the start. Cache hits are
	// never refused. 0 disables shedding (the delay is still measured), as
	// --shed-delay=0 does; the frontend's flag defaults to
	// DefaultShedDelay. Unlike the other fields, 0 is not "the default":
	// a zero that meant the default here and "off" on the command line
	// would have two meanings.
	ShedDelay time.Duration
	// shedArmAfter is how long after the start the limit does not drop
	// (tests shorten it). Default: shedArmAfter.
	shedArmAfter time.Duration

	// MaxTCPConns bounds the open TCP connections over all addresses;
	// connections past it are closed at once and counted.
	// Default: DefaultMaxTCPConns.
	MaxTCPConns int

	// MaxTCPConnsPerSource bounds the open TCP connections of one client
	// address; its connections past it are closed at once and counted.
	// Default: MaxTCPConns / DefaultSourceShare (125), at least 1.
	MaxTCPConnsPerSource int

	// TCPIdleTimeout closes a TCP connection that sent no query for this
	// long while no answer for it was pending; messages shorter than a
	// DNS header do not count as queries. Once more than half of
	// MaxTCPConns are open, connections get a tenth of it, past three
	// quarters a fiftieth, never less than 200ms (tcpIdleTimeout).
	// Default: DefaultTCPIdleTimeout.
	TCPIdleTimeout time.Duration

	// FreeBind sets IP_FREEBIND (IPV6_FREEBIND) so that an address can be
	// bound before it is assigned to an interface: listeners come up first,
	// the node network is installed once the backend is ready.
	FreeBind bool

	// BindRetry is how long StartContext keeps trying to bind an address
	// another process holds (EADDRINUSE), every BindRetryInterval, before
	// it fails. It logs once when it starts waiting, naming the address,
	// and once when bound. For node-ip mode, where the node IP's port 53
	// is freed only when the DNS server being replaced has exited.
	// Default 0: fail at once.
	BindRetry time.Duration

	// QueryLog logs sampled queries of some zones, one structured log
	// line each (observe.go), to QueryLogger at info level. Zero: off.
	QueryLog QueryLog
	// QueryLogger receives the query log, so that it can be written
	// whatever the level of the server's own log. Nil: the server's log,
	// named "query".
	QueryLogger *zap.Logger

	// TopTalkers is how many client addresses each UDP socket (and TCP,
	// together) counts queries and error answers of, over the last
	// TalkerWindow, for Server.TopTalkers. 0: off, and a query pays
	// nothing for it.
	TopTalkers int

	// Inherited holds sockets received from a previous instance (see
	// Server.Files). Start serves each one whose local address and type
	// match a Listen address instead of binding a new socket; the Server
	// takes ownership and closes the ones that match nothing.
	Inherited []*os.File
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.UDPSockets <= 0 {
		c.UDPSockets = min(runtime.GOMAXPROCS(0), DefaultMaxUDPSockets)
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = DefaultReadBuffer
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxTCPConns <= 0 {
		c.MaxTCPConns = DefaultMaxTCPConns
	}
	if c.MaxInflightPerSource <= 0 {
		c.MaxInflightPerSource = max(1, c.MaxInflight/DefaultSourceShare)
	}
	if c.MaxInflightPerDomain <= 0 {
		c.MaxInflightPerDomain = max(1, c.MaxInflight/DefaultDomainShare)
	}
	c.ClusterDomain = strings.ToLower(strings.TrimSuffix(c.ClusterDomain, "."))
	if c.MaxTCPConnsPerSource <= 0 {
		c.MaxTCPConnsPerSource = max(1, c.MaxTCPConns/DefaultSourceShare)
	}
	if c.TCPIdleTimeout <= 0 {
		c.TCPIdleTimeout = DefaultTCPIdleTimeout
	}
	if c.shedArmAfter <= 0 {
		c.shedArmAfter = shedArmAfter
	}
	return c
}

// Validate reports the first problem with c: no address, an address that is
// not an IP literal with a port, or the same address twice.
func (c Config) Validate() error {
	if len(c.Listen) == 0 {
		return errors.New("no listen address")
	}
	seen := make(map[string]bool, len(c.Listen))
	for _, a := range c.Listen {
		ap, err := parseAddr(a)
		if err != nil {
			return err
		}
		key := ap.String()
		if seen[key] {
			return fmt.Errorf("listen address %s given twice", a)
		}
		seen[key] = true
	}
	if c.BatchSize > 1024 {
		return fmt.Errorf("batch size %d: at most 1024 (UIO_MAXIOV)", c.BatchSize)
	}
	if c.TopTalkers < 0 {
		return fmt.Errorf("top talkers %d: must not be negative (0 disables them)", c.TopTalkers)
	}
	if c.QueryLog.Sample < 0 || c.QueryLog.Sample > 1 {
		return fmt.Errorf("query log sample %v: must be in (0, 1]", c.QueryLog.Sample)
	}
	if c.ShedDelay < 0 {
		return fmt.Errorf("shed delay %v: must not be negative (0 disables shedding)", c.ShedDelay)
	}
	d := c.withDefaults()
	if c.MaxInflightPerSource > d.MaxInflight {
		return fmt.Errorf("max in-flight per source %d: more than max in-flight %d", c.MaxInflightPerSource, d.MaxInflight)
	}
	if c.MaxInflightPerDomain > d.MaxInflight {
		return fmt.Errorf("max in-flight per domain %d: more than max in-flight %d", c.MaxInflightPerDomain, d.MaxInflight)
	}
	if c.MaxTCPConnsPerSource > d.MaxTCPConns {
		return fmt.Errorf("max TCP connections per source %d: more than max TCP connections %d", c.MaxTCPConnsPerSource, d.MaxTCPConns)
	}
	return nil
}

// tcpIdleTimeout is how long a connection may now stay idle with open of
// limit connections open: base while fewer than half are, then shorter
// as the slots fill, as unbound shortens the timeout of connections taken
// while more than half of its TCP slots are in use, so that clients that
// hold connections idle make room for new ones (RFC 7766 section 6.2.3).
func tcpIdleTimeout(base time.Duration, open, limit int64) time.Duration {
	d := base
	switch {
	case open*4 > limit*3:
		d = base / 50
	case open*2 > limit:
		d = base / 10
	}
	return min(base, max(d, minTCPIdleTimeout))
}

// parseAddr parses an IP:port listen address. Host names are refused: the
// frontend must not depend on DNS to start serving DNS.
func parseAddr(a string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", a, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("listen address %q: %q is not an IP address", a, host)
	}
	p, err := net.LookupPort("udp", port)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: port: %w", a, err)
	}
	if ip.IsUnspecified() {
		// A wildcard socket may answer from another source address than
		// the one queried, which stub resolvers reject.
		return nil, fmt.Errorf("listen address %q: give a specific IP, not a wildcard", a)
	}
	return &net.UDPAddr{IP: ip, Port: p}, nil
}
