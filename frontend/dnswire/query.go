package dnswire

import "encoding/binary"

// Sizes fixed by the protocol.
const (
	HeaderLen   = 12  // RFC 1035 §4.1.1
	MaxNameLen  = 255 // wire length, root label included (RFC 1035 §2.3.4)
	MaxLabelLen = 63
	// MaxKeyLen is the longest cache key: a name, type, class and flags.
	MaxKeyLen = MaxNameLen + 5
	// MinUDPSize is the UDP payload every client accepts (RFC 1035 §4.2.1,
	// RFC 6891 §6.2.3: smaller advertised sizes count as 512).
	MinUDPSize = 512
	// OPTLen is the length of an OPT record without options.
	OPTLen = 11
)

// Header flag bits (RFC 1035 §4.1.1, RFC 4035 §3.2).
const (
	flagQR = 0x8000
	flagAA = 0x0400
	flagTC = 0x0200
	flagRD = 0x0100
	flagRA = 0x0080
	flagAD = 0x0020
	flagCD = 0x0010
)

// Key flag bits: the last byte of a cache key.
const (
	KeyDO = 1 << 0 // the client set the EDNS DO bit
	KeyCD = 1 << 1 // the client set the CD bit
)

// Record types the parser looks at.
const (
	typeOPT = 41
	// TypeIXFR and TypeAXFR ask for a zone transfer (RFC 1995, RFC 5936).
	TypeIXFR = 251
	TypeAXFR = 252
)

// Query is a parsed query. Name points into the packet it was parsed from,
// so a Query must not outlive that packet. The zero value is ready for
// ParseQuery; a Query lives on the caller's stack.
type Query struct {
	ID     uint16
	Flags  uint16 // the header's second 16 bits as sent
	Opcode uint8
	Name   []byte // the question name as sent (case preserved), root label included
	QType  uint16
	QClass uint16

	// EDNS0 (RFC 6891). UDPSize is the advertised size raised to 512; it is
	// 512 when the query has no OPT record.
	HasOPT      bool
	DO          bool
	EDNSVersion uint8
	UDPSize     uint16

	key    [MaxKeyLen]byte
	keyLen int
}

// RD, CD and AD report header bits of the query.
func (q *Query) RD() bool { return q.Flags&flagRD != 0 }

// CD reports the Checking Disabled bit (RFC 4035 §3.2.2).
func (q *Query) CD() bool { return q.Flags&flagCD != 0 }

// AD reports the Authentic Data bit (RFC 6840 §5.7).
func (q *Query) AD() bool { return q.Flags&flagAD != 0 }

// ZoneTransfer reports whether q asks for a zone transfer (AXFR or IXFR),
// which a server may refuse (RFC 5936 §4.2).
func (q *Query) ZoneTransfer() bool { return q.QType == TypeAXFR || q.QType == TypeIXFR }

// Key returns the cache key: the lowercased name, type, class, and a flags
// byte with KeyDO and KeyCD. It aliases q; copy it to keep it.
func (q *Query) Key() []byte { return q.key[:q.keyLen] }

// Limit returns the largest response the client accepts: its EDNS UDP size
// (512 without EDNS) over UDP, 65535 over TCP.
func (q *Query) Limit(tcp bool) int {
	if tcp {
		return 65535
	}
	return int(q.UDPSize)
}

// ParseQuery parses the query in b into q without allocating. On error q
// holds what was read before the error: the header fields when at least
// HeaderLen bytes were given, and the question and EDNS fields when they
// were parsed, so that AppendError can answer. Bytes after the last record
// are ignored.
func ParseQuery(b []byte, q *Query) error {
	q.Name = nil
	q.HasOPT, q.DO, q.EDNSVersion, q.UDPSize = false, false, 0, MinUDPSize
	q.keyLen = 0
	if len(b) < HeaderLen {
		return ErrShort
	}
	q.ID = binary.BigEndian.Uint16(b)
	q.Flags = binary.BigEndian.Uint16(b[2:])
	q.Opcode = uint8(q.Flags>>11) & 0xf
	if q.Flags&flagQR != 0 {
		return ErrResponse
	}
	if q.Opcode != 0 {
		return ErrOpcode
	}
	if binary.BigEndian.Uint16(b[4:]) != 1 {
		return ErrQDCount
	}

	// Question: the name, lowercased into the key as it is read.
	off := HeaderLen
	for {
		if off >= len(b) {
			return ErrTruncated
		}
		l := int(b[off])
		switch {
		case l&0xc0 == 0xc0:
			return ErrPointer
		case l&0xc0 != 0:
			return ErrName // 0x40 and 0x80 label types (RFC 6891 §5)
		case l > MaxLabelLen: // unreachable with the checks above, kept for clarity
			return ErrName
		}
		if off+1+l > len(b) {
			return ErrTruncated
		}
		n := off - HeaderLen
		if n+1+l > MaxNameLen {
			return ErrName
		}
		q.key[n] = byte(l)
		src, dst := b[off+1:off+1+l], q.key[n+1:n+1+l]
		for i, c := range src {
			dst[i] = lower[c]
		}
		off += 1 + l
		if l == 0 {
			break
		}
	}
	nameLen := off - HeaderLen
	if off+4 > len(b) {
		return ErrTruncated
	}
	q.Name = b[HeaderLen:off]
	q.QType = binary.BigEndian.Uint16(b[off:])
	q.QClass = binary.BigEndian.Uint16(b[off+2:])
	off += 4
	k := nameLen
	copy(q.key[k:], b[off-4:off])
	var kf byte
	if q.CD() {
		kf |= KeyCD
	}
	q.key[k+4] = kf
	q.keyLen = k + 5

	// Answer and authority records are skipped; the additional section is
	// searched for the OPT record.
	an := int(binary.BigEndian.Uint16(b[6:]))
	ns := int(binary.BigEndian.Uint16(b[8:]))
	ar := int(binary.BigEndian.Uint16(b[10:]))
	for i := 0; i < an+ns+ar; i++ {
		start := off
		var ok bool
		if off, ok = skipName(b, off); !ok || off+10 > len(b) {
			return ErrTruncated
		}
		typ := binary.BigEndian.Uint16(b[off:])
		rdlen := int(binary.BigEndian.Uint16(b[off+8:]))
		if off+10+rdlen > len(b) {
			return ErrTruncated
		}
		if typ == typeOPT && i >= an+ns {
			if q.HasOPT || off != start+1 || b[start] != 0 {
				return ErrOPT
			}
			q.HasOPT = true
			size := binary.BigEndian.Uint16(b[off+2:])
			if size < MinUDPSize {
				size = MinUDPSize
			}
			q.UDPSize = size
			q.EDNSVersion = b[off+5]
			q.DO = b[off+6]&0x80 != 0
		}
		off += 10 + rdlen
	}
	if q.DO {
		q.key[k+4] |= KeyDO
	}
	if q.HasOPT && q.EDNSVersion != 0 {
		return ErrBadVers
	}
	return nil
}

// lower maps ASCII upper case to lower case and every other byte to itself
// (RFC 4343: DNS names compare case-insensitively in ASCII only).
var lower = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if 'A' <= i && i <= 'Z' {
			t[i] = byte(i) + 'a' - 'A'
		}
	}
	return t
}()

// skipName returns the offset after the name at off, stopping at the first
// compression pointer (which is not followed).
func skipName(b []byte, off int) (int, bool) {
	for n := 0; ; {
		if off >= len(b) {
			return 0, false
		}
		l := int(b[off])
		switch {
		case l&0xc0 == 0xc0:
			if off+2 > len(b) {
				return 0, false
			}
			return off + 2, true
		case l&0xc0 != 0:
			return 0, false
		case l == 0:
			return off + 1, true
		}
		n += 1 + l
		if n > MaxNameLen {
			return 0, false
		}
		off += 1 + l
	}
}

// KeyName returns the lowercased wire name at the start of a cache key.
func KeyName(key []byte) []byte {
	if len(key) < 5 {
		return nil
	}
	return key[:len(key)-5]
}

// KeyQuestion returns the type, class and flags byte stored in a cache key.
func KeyQuestion(key []byte) (qtype, qclass uint16, flags byte) {
	if len(key) < 5 {
		return 0, 0, 0
	}
	t := key[len(key)-5:]
	return binary.BigEndian.Uint16(t), binary.BigEndian.Uint16(t[2:]), t[4]
}
