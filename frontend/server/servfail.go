package server

import "github.com/nodedns/nodedns/frontend/dnswire"

// headerLen is the size of the DNS message header (RFC 1035 section 4.1.1),
// the short name the package's readers use.
const headerLen = dnswire.HeaderLen

// servfail appends to dst[:0] a SERVFAIL answer to req built from its header
// and first question only, without trusting any handler code: it is the
// answer of last resort after a handler panic or an oversized response.
// It returns nil when req is too short to carry a header or is itself a
// response (never answer a response: that is how reflection loops start).
func servfail(dst, req []byte) []byte { return errorAnswer(dst, req, 2) }

// refused appends to dst[:0] a REFUSED answer to req (RFC 1035 4.1.1), the
// answer to a client outside Config.Sources; nil as servfail.
func refused(dst, req []byte) []byte { return errorAnswer(dst, req, 5) }

// errorAnswer appends to dst[:0] an answer with rcode to req, built from
// its header and first question only.
func errorAnswer(dst, req []byte, rcode byte) []byte {
	if len(req) < headerLen || req[2]&0x80 != 0 {
		return nil
	}
	qlen := questionLen(req)
	dst = append(dst[:0], req[:headerLen]...)
	// QR=1, keep OPCODE and RD; RA=1, RCODE (RFC 1035 4.1.1).
	dst[2] = 0x80 | req[2]&0x79
	dst[3] = 0x80 | rcode
	var qd byte
	if qlen > 0 {
		qd = 1
	}
	dst[4], dst[5] = 0, qd
	for i := 6; i < headerLen; i++ {
		dst[i] = 0
	}
	return append(dst, req[headerLen:headerLen+qlen]...)
}

// questionLen returns the length of the first question of req (name, type,
// class), or 0 when req has no question or it does not parse (a name longer
// than 255 octets does not). Query names
// carry no compression pointers (RFC 1035 4.1.4 allows them, no stub sends
// them in a question), so a pointer counts as not parsing.
func questionLen(req []byte) int {
	if req[4] == 0 && req[5] == 0 {
		return 0
	}
	i := headerLen
	for {
		if i >= len(req) {
			return 0
		}
		l := int(req[i])
		if l == 0 {
			i++
			break
		}
		if l&0xC0 != 0 {
			return 0
		}
		i += 1 + l
		if i-headerLen >= dnswire.MaxNameLen {
			return 0 // longer than a name can be, with its root label
		}
	}
	if i+4 > len(req) {
		return 0
	}
	return i + 4 - headerLen
}
