package upstream

import (
	"fmt"
	"time"
)

// Status describes the pool for /ready details and diagnostics.
type Status struct {
	// Using is the address that answered the last exchange ("" before one)
	// and UsingKind its kind, "backend" or "fallback".
	Using     string
	UsingKind string
	// BackendHealthy is false while the backend's probes have it down.
	BackendHealthy bool
	// LastError is the backend's most recent failure ("" if none) and
	// LastErrorAt when it happened.
	LastError   string
	LastErrorAt time.Time
	// Addresses lists every address, backend first.
	Addresses []AddressStatus
}

// AddressStatus is the health of one address.
type AddressStatus struct {
	Kind                string // "backend" or "fallback"
	Addr                string
	Healthy             bool
	ConsecutiveFailures int       // consecutive failed probes
	NextProbe           time.Time // when down, when the next probe is due
	LastError           string    // most recent failure, probe or query; "" if none
	LastReason          string    // Reason of LastError, "" if none
}

// Status returns a snapshot of the pool's state.
func (p *Pool) Status() Status {
	var s Status
	p.mu.Lock()
	if p.using != nil {
		s.Using, s.UsingKind = p.using.addr, p.using.kind
	}
	p.mu.Unlock()
	for _, a := range p.addrs {
		h := a.health.snapshot()
		as := AddressStatus{Kind: a.kind, Addr: a.addr, Healthy: !h.down, ConsecutiveFailures: h.fails, NextProbe: h.nextProbe}
		if h.lastErr != nil {
			as.LastError, as.LastReason = h.lastErr.Error(), Reason(h.lastErr)
		}
		s.Addresses = append(s.Addresses, as)
	}
	b := p.addrs[0].health.snapshot()
	s.BackendHealthy = !b.down
	if b.lastErr != nil {
		s.LastError, s.LastErrorAt = b.lastErr.Error(), b.lastErrAt
	}
	return s
}

// String is a one-line summary for /ready details, such as
// "backend 127.0.0.1:5300 down (refused), using fallback 10.96.0.11:53".
func (s Status) String() string {
	if len(s.Addresses) == 0 {
		return "no upstream"
	}
	b := s.Addresses[0]
	if s.BackendHealthy {
		return fmt.Sprintf("backend %s healthy", b.Addr)
	}
	msg := fmt.Sprintf("backend %s down (%s)", b.Addr, b.LastReason)
	switch {
	case len(s.Addresses) == 1:
		return msg + ", no fallback configured"
	case s.UsingKind == kindFallback:
		return msg + ", using fallback " + s.Using
	}
	return msg + ", no fallback has answered yet"
}
