package dnswire

// ParseError says why a query was rejected and how to answer it.
// The package's errors are fixed values, so returning one does not allocate;
// compare them with errors.Is or ==.
type ParseError struct {
	// Reason is a short stable word, used as a metric label value.
	Reason string
	// Rcode is the response code to answer with, or -1 to drop the query
	// without an answer (no readable header, or the packet is a response).
	Rcode int
}

func (e *ParseError) Error() string { return "dns query: " + e.Reason }

// Rcodes used in answers made here (RFC 1035 §4.1.1, RFC 6891 §9).
const (
	RcodeSuccess  = 0
	RcodeFormErr  = 1
	RcodeServFail = 2
	RcodeNXDomain = 3
	RcodeNotImp   = 4
	RcodeRefused  = 5
	RcodeBadVers  = 16 // extended: needs an OPT record (RFC 6891 §6.1.3)
)

// The errors ParseQuery returns.
var (
	// ErrShort: fewer than 12 bytes, no header to answer to.
	ErrShort = &ParseError{Reason: "short", Rcode: -1}
	// ErrResponse: the QR bit is set; answering responses invites loops.
	ErrResponse = &ParseError{Reason: "response", Rcode: -1}
	// ErrOpcode: an opcode other than QUERY (RFC 1035 §4.1.1).
	ErrOpcode = &ParseError{Reason: "opcode", Rcode: RcodeNotImp}
	// ErrQDCount: QDCOUNT is not 1 (RFC 9619).
	ErrQDCount = &ParseError{Reason: "qdcount", Rcode: RcodeFormErr}
	// ErrName: a label over 63 bytes, a name over 255 bytes, or a reserved
	// label type (RFC 1035 §2.3.4, RFC 6891 §5).
	ErrName = &ParseError{Reason: "name", Rcode: RcodeFormErr}
	// ErrPointer: a compression pointer in the question name.
	ErrPointer = &ParseError{Reason: "pointer", Rcode: RcodeFormErr}
	// ErrTruncated: a section runs past the end of the packet.
	ErrTruncated = &ParseError{Reason: "truncated", Rcode: RcodeFormErr}
	// ErrOPT: more than one OPT record, or one whose owner is not the root
	// (RFC 6891 §6.1.1).
	ErrOPT = &ParseError{Reason: "opt", Rcode: RcodeFormErr}
	// ErrBadVers: an EDNS version above 0 (RFC 6891 §6.1.3).
	ErrBadVers = &ParseError{Reason: "badvers", Rcode: RcodeBadVers}
)

// Reasons lists every ParseError, so that metrics can pre-create a series
// for each reason.
var Reasons = []*ParseError{ErrShort, ErrResponse, ErrOpcode, ErrQDCount, ErrName, ErrPointer, ErrTruncated, ErrOPT, ErrBadVers}
