package server

import (
	"context"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Proto says how a query arrived: its transport (UDP or TCP), with the
// IPv6 bit set when the client's address is IPv6. An IPv4-mapped address
// on a dual-stack socket counts as IPv4, as CoreDNS counts it.
type Proto uint8

// Transports, and the address family bit.
const (
	UDP  Proto = 0
	TCP  Proto = 1
	IPv6 Proto = 2
)

// IsTCP reports whether the query came over TCP.
func (p Proto) IsTCP() bool { return p&TCP != 0 }

// IsIPv6 reports whether the client's address is IPv6.
func (p Proto) IsIPv6() bool { return p&IPv6 != 0 }

// udpProto is the Proto of a datagram from sa.
func udpProto(sa *unix.RawSockaddrInet6) Proto {
	if sa.Family == unix.AF_INET6 && !isV4Mapped(sa.Addr) {
		return UDP | IPv6
	}
	return UDP
}

// isV4Mapped reports whether a is ::ffff:a.b.c.d.
func isV4Mapped(a [16]byte) bool {
	return [12]byte(a[:12]) == [12]byte{10: 0xff, 11: 0xff}
}

// Handler answers DNS queries given as wire bytes. The server owns the
// sockets; the handler owns everything DNS.
type Handler interface {
	// ServeFast answers req from memory when it can: it appends the response
	// to dst[:0] and returns it with ok=true (a cache hit, or a locally made
	// FORMERR/NOTIMP answer). A nil response with ok=true means drop the
	// query. ok=false is a miss: the server then calls ServeSlow on another
	// goroutine. dst has a capacity of at least 65535 bytes. ServeFast must
	// not retain req or dst and must not allocate on a hit.
	ServeFast(dst, req []byte, proto Proto) (resp []byte, ok bool)

	// ServeSlow resolves a miss. req belongs to the callee until ServeSlow
	// returns; the server then reuses its buffer. It returns the response to
	// send (appended to dst[:0]; dst may be small, append grows it), or nil
	// to drop the query.
	ServeSlow(ctx context.Context, dst, req []byte, proto Proto) []byte

	// Overloaded returns the answer (stale, or SERVFAIL) for a miss refused
	// because too many misses are in flight, over all clients or of this
	// client, appended to dst[:0], or nil to drop. proto is how the query
	// came: an answer over TCP is not truncated to the UDP limit
	// (RFC 7766 section 8). dst has a capacity of at least 65535 bytes.
	Overloaded(dst, req []byte, proto Proto) []byte
}

// ClientHandler is a Handler that is told, on a miss, which client asked:
// the server then calls ServeSlowFrom instead of ServeSlow. client is the
// address the query came from (an IPv4-mapped address unmapped).
type ClientHandler interface {
	ServeSlowFrom(ctx context.Context, dst, req []byte, proto Proto, client netip.Addr) []byte
}
