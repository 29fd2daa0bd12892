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
		{"backoff max below the probe interval", Config{ProbeInterval: time.Minute, BackoffMax: time.Second}, false},
		{"negative probe timeout", Config{ProbeTimeout: -time.Second}, false},
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
		{fmt.Errorf("%w: SERVFAIL", ErrProbeRcode), ReasonRcode},
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
