package dnswire

import "encoding/binary"

// OurUDPSize is the UDP payload size advertised in our OPT records: the
// DNS Flag Day 2020 value, which avoids IP fragmentation on common MTUs.
const OurUDPSize = 1232

// AppendOPT appends an OPT record without options (RFC 6891 §6.1.2):
// our UDP size, the extended rcode bits of rcode, version 0, and the DO bit
// echoed (RFC 3225 §3). The caller increments ARCOUNT.
func AppendOPT(dst []byte, rcode int, do bool) []byte {
	var doBits byte
	if do {
		doBits = 0x80
	}
	return append(dst,
		0,          // root owner
		0, typeOPT, // TYPE
		byte(OurUDPSize>>8), byte(OurUDPSize&0xff), // CLASS = UDP payload size
		byte(rcode>>4), 0, doBits, 0, // TTL = extended rcode, version, DO, Z
		0, 0) // RDLEN
}

// AppendError appends to dst an answer with rcode to the query parsed into
// q from req (ParseQuery must have read at least the header). It echoes the
// ID, opcode, RD and CD bits, the question when it was parsed, and an OPT
// record when the query had one (always for BADVERS, whose rcode needs it).
func AppendError(dst, req []byte, q *Query, rcode int) []byte {
	flags := flagQR | q.Flags&(0x7800|flagRD|flagCD) | uint16(rcode&0xf)
	var qd, ar byte
	if q.Name != nil {
		qd = 1
	}
	opt := q.HasOPT || rcode > 0xf
	if opt {
		ar = 1
	}
	dst = append(dst, byte(q.ID>>8), byte(q.ID), byte(flags>>8), byte(flags), 0, qd, 0, 0, 0, 0, 0, ar)
	if q.Name != nil {
		end := HeaderLen + len(q.Name) + 4
		dst = append(dst, req[HeaderLen:end]...)
	}
	if opt {
		dst = AppendOPT(dst, rcode, q.DO)
	}
	return dst
}

// TTLOffsets appends to offs the offset of the TTL field of every record in
// the answer, authority and additional sections of the packed message msg,
// skipping OPT pseudo-records, whose TTL field holds flags (RFC 6891 §6.1.3).
// Names are skipped without following compression pointers.
func TTLOffsets(msg []byte, offs []uint16) ([]uint16, error) {
	if len(msg) < HeaderLen || len(msg) > 65535 {
		return offs, ErrTruncated
	}
	qd := int(binary.BigEndian.Uint16(msg[4:]))
	n := int(binary.BigEndian.Uint16(msg[6:])) + int(binary.BigEndian.Uint16(msg[8:])) + int(binary.BigEndian.Uint16(msg[10:]))
	off := HeaderLen
	var ok bool
	for i := 0; i < qd; i++ {
		if off, ok = skipName(msg, off); !ok || off+4 > len(msg) {
			return offs, ErrTruncated
		}
		off += 4
	}
	for i := 0; i < n; i++ {
		if off, ok = skipName(msg, off); !ok || off+10 > len(msg) {
			return offs, ErrTruncated
		}
		rdlen := int(binary.BigEndian.Uint16(msg[off+8:]))
		if off+10+rdlen > len(msg) {
			return offs, ErrTruncated
		}
		if binary.BigEndian.Uint16(msg[off:]) != typeOPT {
			offs = append(offs, uint16(off+4))
		}
		off += 10 + rdlen
	}
	return offs, nil
}
