package cache

import (
	"encoding/binary"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// Kind classifies a cached answer.
type Kind uint8

// Kinds of answers. Denial and ServFail share the negative capacity.
const (
	Success  Kind = iota // NOERROR with records
	Denial               // NXDOMAIN or NODATA (RFC 2308)
	ServFail             // a SERVFAIL from the backend (RFC 2308 §7.1)
	noCache              // answered but never stored
)

func (k Kind) negative() bool { return k == Denial || k == ServFail }

// Entry is one answer in wire format. It is immutable once built, except
// for the fields guarded by its shard's mutex, so a hit may copy its bytes
// after the lock is released.
//
// The fields are ordered and sized so that an Entry takes 96 bytes and a
// single further allocation (data) holds the rest: 10,000 answers to
// Kubernetes Service names take 2.1 MB (2.6 MB with a separate slice of TTL
// offsets and wider fields).
type Entry struct {
	// Guarded by the shard mutex.
	prev, next  *Entry
	recheck     int64 // unix ns: until then an expired entry is served stale
	hits        uint32
	seg         uint8
	prefetching bool

	kind   Kind
	keyLen uint16 // data[:keyLen] is the key
	nTTL   uint16 // TTL offsets at the end of data
	ttl    uint32 // seconds, the smallest TTL at insertion
	hash   uint64
	// data holds the key, the packed answer (ID 0, lowercased question, no
	// OPT) and then the offsets of the answer's TTL fields, each a
	// big-endian uint16.
	data   []byte
	stored int64 // unix ns
	expiry int64 // unix ns: stored + ttl
	staleT int64 // unix ns: last instant it may be served stale
}

func (e *Entry) key() []byte { return e.data[:e.keyLen] }
func (e *Entry) msg() []byte { return e.data[e.keyLen : len(e.data)-2*int(e.nTTL)] }

// ttlOffsets returns the offsets of the TTL fields in msg(), encoded.
func (e *Entry) ttlOffsets() []byte { return e.data[len(e.data)-2*int(e.nTTL):] }

// rcode returns the answer's RCODE (its header's low four bits).
func (e *Entry) rcode() int { return int(e.msg()[3] & 0x0f) }

// answers returns the answer's ANCOUNT.
func (e *Entry) answers() int { return int(binary.BigEndian.Uint16(e.msg()[6:])) }

// Kind reports what the entry holds.
func (e *Entry) Kind() Kind { return e.kind }

// write appends to dst[:0] the entry as an answer to q: a copy of the stored
// bytes patched with the client's ID, RD and CD bits, question case, TTLs
// reduced by age seconds (or capped at StaleTTL when stale), an OPT record if
// q had one, and TC with empty record sections when the answer exceeds
// limit. q's key must equal the entry's key.
func (e *Entry) write(dst []byte, q *dnswire.Query, age uint32, stale bool, limit int) []byte {
	msg := e.msg()
	dst = append(dst[:0], msg...)
	// The question case as sent (the key holds it lowercased). Names in the
	// records that point at the question follow it.
	copy(dst[dnswire.HeaderLen:], q.Name)
	return e.patch(dst, q, 0, age, stale, limit)
}

// writeBelow appends to dst[:0] the entry, an NXDOMAIN packed without
// compression (build), as the answer to q, whose name lies under the
// entry's: its header and records with q's question, patched as by write.
func (e *Entry) writeBelow(dst []byte, q *dnswire.Query, age uint32, limit int) []byte {
	msg := e.msg()
	qend := dnswire.HeaderLen + len(dnswire.KeyName(e.key()))
	dst = append(dst[:0], msg[:dnswire.HeaderLen]...)
	dst = append(dst, q.Name...)
	dst = append(dst, msg[qend:]...)
	return e.patch(dst, q, len(q.Name)+dnswire.HeaderLen-qend, age, false, limit)
}

// patch finishes in dst the answer to q copied from the entry's message,
// with its records shift bytes further on than in the message.
func (e *Entry) patch(dst []byte, q *dnswire.Query, shift int, age uint32, stale bool, limit int) []byte {
	msg := e.msg()
	dst[0], dst[1] = byte(q.ID>>8), byte(q.ID)
	// QR, AA and TC from the answer (only an uncached answer can have TC);
	// RD from the query (RFC 1035 §4.1.1).
	dst[2] = 0x80 | msg[2]&0x06 | byte(q.Flags>>8)&0x01
	// RA and RCODE from the answer; AD only to clients that asked for DNSSEC
	// data (RFC 6840 §5.8); CD echoed (RFC 4035 §3.2.2).
	b3 := msg[3]&0x8f | byte(q.Flags)&0x10
	if q.DO || q.AD() {
		b3 |= msg[3] & 0x20
	}
	dst[3] = b3
	for offs := e.ttlOffsets(); len(offs) >= 2; offs = offs[2:] {
		off := binary.BigEndian.Uint16(offs)
		t := binary.BigEndian.Uint32(msg[off:])
		switch {
		case stale:
			t = min(t, StaleTTL)
		case t > age:
			t -= age
		default:
			t = 0
		}
		binary.BigEndian.PutUint32(dst[int(off)+shift:], t)
	}
	size := len(dst)
	if q.HasOPT {
		size += dnswire.OPTLen
	}
	if size > limit {
		// RFC 2181 §9: drop whole sections and set TC; the client retries
		// over TCP.
		dst = dst[:dnswire.HeaderLen+len(q.Name)+4]
		dst[2] |= 0x02
		clear(dst[6:12])
	}
	if q.HasOPT {
		ar := binary.BigEndian.Uint16(dst[10:]) + 1
		binary.BigEndian.PutUint16(dst[10:], ar)
		dst = dnswire.AppendOPT(dst, 0, q.DO)
	}
	return dst
}
