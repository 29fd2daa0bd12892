// Package dnswire reads DNS queries and patches DNS responses directly on
// wire bytes, without allocating, for the frontend's cache-hit path.
//
// ParseQuery validates a query (header, a single question, the EDNS0 OPT
// record) and derives the cache key. AppendError builds FORMERR, NOTIMP,
// SERVFAIL, REFUSED and BADVERS answers. TTLOffsets finds every TTL field of
// a packed response so that a cached copy can be aged in place.
//
// Nothing here follows a compression pointer: a query name must not contain
// one (RFC 1035 §4.1.4 allows them, but no client compresses its single
// question, and refusing them removes pointer loops and forward references
// from the attack surface), and names in other sections are only skipped,
// which ends at the first pointer.
package dnswire
