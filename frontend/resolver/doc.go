// Package resolver answers the frontend's DNS queries: it implements
// server.Handler on top of the wire-format cache and an upstream Exchanger.
//
// A cache hit is answered in ServeFast without allocating. A miss goes to
// ServeSlow, which asks the backend through the Exchanger, checks that the
// answer is for the question asked (a mismatch is never cached), stores it,
// and answers through the same wire path as a hit. Entries that keep being
// asked for are refreshed in the background before they expire (prefetch),
// and when the backend fails, expired entries are served for a while with a
// short TTL (serve-stale, RFC 8767).
package resolver
