package upstream

import (
	"fmt"

	"github.com/miekg/dns"
	"github.com/nodedns/nodedns/frontend/dnswire"
)

// MatchQuestion reports, as an error wrapping ErrMismatch, how r fails to
// answer question q, or nil when it answers it: a response (QR set) to a
// standard QUERY with the same name, ignoring ASCII case (RFC 4343), type
// and class (RFC 5452 section 9.1). An error answer other than NXDOMAIN
// may omit the question (RFC 1035 section 4.1.1 leaves it to the server;
// RFC 6891 section 7 for FORMERR): it carries no records to cache, so it
// matches. It is the one place the frontend compares a question with an
// answer: the pool before it returns an answer, the resolver before it
// caches one from whatever Exchanger it was given.
func MatchQuestion(r *dns.Msg, q dns.Question) error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: no message", ErrMismatch)
	case !r.Response:
		return fmt.Errorf("%w: QR bit not set", ErrMismatch)
	case r.Opcode != dns.OpcodeQuery:
		return fmt.Errorf("%w: opcode %s", ErrMismatch, dns.OpcodeToString[r.Opcode])
	}
	if len(r.Question) == 0 && r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError &&
		len(r.Answer)+len(r.Ns) == 0 {
		return nil
	}
	if len(r.Question) != 1 {
		return fmt.Errorf("%w: %d questions", ErrMismatch, len(r.Question))
	}
	rq := r.Question[0]
	if rq.Qtype != q.Qtype || rq.Qclass != q.Qclass || !dnswire.EqualName(rq.Name, q.Name) {
		return fmt.Errorf("%w: question %s %s %s, want %s %s %s", ErrMismatch,
			rq.Name, dns.Class(rq.Qclass), dns.Type(rq.Qtype), q.Name, dns.Class(q.Qclass), dns.Type(q.Qtype))
	}
	return nil
}
