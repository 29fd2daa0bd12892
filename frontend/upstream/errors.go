package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

var (
	// ErrOverloaded is returned at once when MaxInflight upstream exchanges
	// are already running. The resolver answers SERVFAIL (or stale data).
	ErrOverloaded = errors.New("upstream: too many exchanges in flight")
	// ErrProbeRcode marks a probe answered with an rcode other than
	// NOERROR: the address is reachable but cannot answer a miss.
	ErrProbeRcode = errors.New("probe answered with an error rcode")
	// ErrMismatch marks a response whose ID or question does not match
	// the query sent (RFC 5452 section 9.1): it is dropped, not returned.
	ErrMismatch = errors.New("response does not match query")
	// ErrBadQuery is returned for a message without exactly one question.
	ErrBadQuery = errors.New("upstream: query must have exactly one question")
	// ErrClosed is returned by Exchange after Close.
	ErrClosed = errors.New("upstream: pool closed")
)

// Error is a failed attempt on one address.
type Error struct {
	Upstream string // "backend" or "fallback"
	Addr     string // host:port
	Err      error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s: %v", e.Upstream, e.Addr, e.Err) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Reasons returned by Reason. The set is closed so that it can label metrics.
const (
	ReasonOK         = "ok"
	ReasonRefused    = "refused"    // nothing listens: process down or restarting
	ReasonTimeout    = "timeout"    // no answer in time: hung, overloaded or black-holed
	ReasonReset      = "reset"      // connection reset or broken pipe
	ReasonEOF        = "eof"        // peer closed the connection
	ReasonMismatch   = "mismatch"   // response ID or question differs
	ReasonOverloaded = "overloaded" // MaxInflight reached
	ReasonCanceled   = "canceled"   // caller gave up
	ReasonRcode      = "rcode"      // a probe answered SERVFAIL, REFUSED or another error rcode
	ReasonOther      = "other"
)

// Reasons lists every value Reason returns.
var Reasons = []string{ReasonOK, ReasonRefused, ReasonTimeout, ReasonReset, ReasonEOF,
	ReasonMismatch, ReasonOverloaded, ReasonCanceled, ReasonRcode, ReasonOther}

// Reason classifies err into one of Reasons; nil is ReasonOK. It is the one
// place that tells "connection refused" from "i/o timeout"; diagnostics and
// metric labels use it.
func Reason(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ReasonOK
	case errors.Is(err, ErrOverloaded):
		return ReasonOverloaded
	case errors.Is(err, ErrMismatch):
		return ReasonMismatch
	case errors.Is(err, ErrProbeRcode):
		return ReasonRcode
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return ReasonReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonEOF
	}
	return ReasonOther
}

// deadConn reports whether err, seen on a reused connection, means the peer
// had closed it while it sat in the pool (the usual state after a backend
// restart), so that a fresh connection deserves a retry.
func deadConn(err error) bool {
	switch Reason(err) {
	case ReasonEOF, ReasonReset:
		return true
	}
	return false
}
