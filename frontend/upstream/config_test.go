package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"fallbacks", Config{Fallbacks: []string{"10.96.0.11:5301", "[fd00::11]:5301"}}, true},
		{"no port", Config{Backend: "127.0.0.1"}, false},
		{"duplicate", Config{Fallbacks: []string{"127.0.0.1:5300"}}, false},
		{"negative timeout", Config{Timeout: -time.Second}, false},
		{"negative inflight", Config{MaxInflight: -1}, false},
		{"backoff min above max", Config{BackoffMin: time.Minute, BackoffMax: time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestReason(t *testing.T) {
	_, refused := net.Dial("tcp", deadAddr(t))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ReasonOK},
		{refused, ReasonRefused},
		{&Error{"backend", "127.0.0.1:5300", refused}, ReasonRefused},
		{fmt.Errorf("%w: %w", ErrNoUpstream, refused), ReasonRefused},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, ReasonTimeout},
		{context.DeadlineExceeded, ReasonTimeout},
		{context.Canceled, ReasonCanceled},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ReasonReset},
		{io.EOF, ReasonEOF},
		{io.ErrUnexpectedEOF, ReasonEOF},
		{ErrOverloaded, ReasonOverloaded},
		{fmt.Errorf("x: %w", ErrMismatch), ReasonMismatch},
		{errors.New("boom"), ReasonOther},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestHealthBackoff(t *testing.T) {
	h := health{threshold: 2, backoffMin: time.Second, backoffMax: 4 * time.Second}
	now := time.Unix(0, 0)
	boom := errors.New("boom")
	if h.failure(now, now, boom) {
		t.Fatal("down after one failure")
	}
	if !h.failure(now, now, boom) {
		t.Fatal("not down after two failures")
	}
	// Waits: 1s, then 2s, 4s, 4s (capped) after each failed trial.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if h.admit(now.Add(wait - time.Millisecond)) {
			t.Fatalf("step %d: admitted before %v", i, wait)
		}
		now = now.Add(wait)
		if !h.admit(now) {
			t.Fatalf("step %d: trial not admitted after %v", i, wait)
		}
		if h.admit(now) {
			t.Fatalf("step %d: second concurrent trial admitted", i)
		}
		h.failure(now, now, boom)
	}
	now = now.Add(4 * time.Second)
	if !h.admit(now) || !h.success(now) {
		t.Fatal("successful trial did not report recovery")
	}
	if !h.admit(now) || !h.admit(now) {
		t.Fatal("recovered address not admitted freely")
	}
	if h.failure(now, now, boom) {
		t.Fatal("one failure after recovery marked it down")
	}
}

func TestHealthTimeoutWhileAnswering(t *testing.T) {
	h := health{threshold: 1, backoffMin: time.Second, backoffMax: time.Second}
	start := time.Unix(0, 0)
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	h.success(start.Add(time.Second)) // another query answered meanwhile
	if h.failure(start, start.Add(2*time.Second), timeout) {
		t.Error("a timeout marked down an address that answered meanwhile")
	}
	if !h.failure(start.Add(2*time.Second), start.Add(4*time.Second), timeout) {
		t.Error("a timeout with no answer meanwhile did not mark the address down")
	}
}

func TestStatusString(t *testing.T) {
	b := AddressStatus{Kind: "backend", Addr: "127.0.0.1:5300", LastReason: ReasonRefused}
	f := AddressStatus{Kind: "fallback", Addr: "10.96.0.11:5301", Healthy: true}
	for _, tc := range []struct {
		s    Status
		want string
	}{
		{Status{BackendHealthy: true, Addresses: []AddressStatus{b}}, "backend 127.0.0.1:5300 healthy"},
		{Status{Addresses: []AddressStatus{b}}, "backend 127.0.0.1:5300 down (refused), no fallback configured"},
		{Status{Addresses: []AddressStatus{b, f}}, "backend 127.0.0.1:5300 down (refused), no fallback has answered yet"},
		{Status{Using: f.Addr, UsingKind: "fallback", Addresses: []AddressStatus{b, f}},
			"backend 127.0.0.1:5300 down (refused), using fallback 10.96.0.11:5301"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
