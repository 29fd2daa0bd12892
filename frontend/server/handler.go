package server

import "context"

// Proto is the transport a query arrived on.
type Proto uint8

// Transports.
const (
	UDP Proto = iota
	TCP
)

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

	// Overloaded returns the answer (SERVFAIL) for a query refused because
	// too many misses are in flight, appended to dst[:0], or nil to drop.
	Overloaded(dst, req []byte) []byte
}
