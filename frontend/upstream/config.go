package upstream

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Defaults for Config fields left at their zero value.
const (
	// DefaultBackend is the local backend's DNS listener for the frontend.
	DefaultBackend = "127.0.0.1:5300"
	// DefaultTimeout bounds one attempt (dial, write and read) on one
	// address. It is longer than the backend can take to answer a name it
	// forwards, so that a name which is merely slow upstream is answered
	// (or given the backend's own SERVFAIL) rather than timed out and sent
	// to a fallback, which would forward it to the same slow servers:
	// CoreDNS's forward plugin (v1.15.0, plugin/forward/forward.go) starts
	// no new try after its defaultTimeout of 5s, and a try started just
	// before that waits up to its defaultReadTimeout of 2s for the answer.
	// The half second on top covers the loopback hop and the backend's
	// scheduling. A hung backend costs this much only to the misses of the
	// first few seconds, until its probes mark it down.
	DefaultTimeout = forwardTimeout + forwardReadTimeout + 500*time.Millisecond
	// DefaultMaxInflight bounds concurrent upstream exchanges (after
	// coalescing), like CoreDNS forward's max_concurrent. It equals the
	// server's limit on misses (server.DefaultMaxInflight), and the
	// frontend sets both from one flag, --max-inflight: the server's bound
	// counts pods' misses, this one also counts what the frontend asks on
	// its own (refreshes, search-path prefetch), so that a budget of N
	// misses is never cut to less by the pool behind it.
	DefaultMaxInflight = 2000
	// DefaultIdleTimeout closes a connection left idle this long. It stays
	// below CoreDNS's TCP idle timeout (10s in core/dnsserver of CoreDNS
	// v1.15.0, the backend's build), so that the frontend, not the backend,
	// closes idle connections and a pooled connection is rarely found
	// closed under a query.
	DefaultIdleTimeout = 5 * time.Second
	// DefaultProbeInterval is the time between probes of an address that
	// is up: a dead or hung backend is marked down within two intervals
	// and a probe timeout, at the cost of one loopback query a second.
	DefaultProbeInterval = time.Second
	// DefaultProbeTimeout bounds one probe. The backend answers the probe
	// from memory in well under a millisecond, so a second without an
	// answer is a hung or overloaded process; CoreDNS's own health checks
	// wait as long (plugin/pkg/proxy/health.go, defaultTimeout).
	DefaultProbeTimeout = time.Second
	// DefaultFailThreshold is how many consecutive failed probes mark an
	// address down (CoreDNS forward's max_fails, which also counts failed
	// health checks and not failed queries, uses the same value).
	DefaultFailThreshold = 2
	// DefaultBackoffMax bounds the wait between probes of a down address,
	// which starts at the probe interval and doubles with each failed
	// probe. A backend back from a restart is probed within this long (at
	// once when the gate sees it ready: Pool.ProbeBackend), and a dead
	// fallback behind a Service costs each node one probe every 5s.
	DefaultBackoffMax = 5 * time.Second
)

// The backend's forward timeouts, for DefaultTimeout: CoreDNS v1.15.0,
// plugin/forward/forward.go, defaultTimeout and defaultReadTimeout.
const (
	forwardTimeout     = 5 * time.Second
	forwardReadTimeout = 2 * time.Second
)

// Config configures a Pool. Zero values take the defaults above.
type Config struct {
	// Backend is the local backend's TCP address, tried first.
	// Default DefaultBackend.
	Backend string
	// Fallbacks are tried in order when the backend fails or is down,
	// typically a Service in front of other nodes' backends. Default none.
	Fallbacks []string
	// Timeout bounds one attempt on one address. Default DefaultTimeout.
	Timeout time.Duration
	// MaxInflight bounds concurrent upstream exchanges; past it Exchange
	// returns ErrOverloaded at once. Default DefaultMaxInflight.
	MaxInflight int
	// MaxIdleConns bounds the idle connections kept per address. Default
	// MaxInflight, the most connections the exchanges in flight can hold
	// at once (one each), so that a connection is never closed on its
	// return for want of room: one closed there is dialled again by the
	// next burst of the same concurrency, and each such churned connection
	// leaves a socket in TIME_WAIT and, unless NOTRACKed, a conntrack entry
	// (docs/architecture.md, "Frontend to backend"). What the traffic no
	// longer uses expires after IdleTimeout, so the pool follows the peak
	// concurrency of the last few seconds.
	MaxIdleConns int
	// IdleTimeout closes connections idle this long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ProbeInterval is the time between probes of an address that is up,
	// and the first wait after it goes down. Default DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// FailThreshold is the number of consecutive failed probes that mark
	// an address down; failed queries never do. Default DefaultFailThreshold.
	FailThreshold int
	// BackoffMax bounds the wait between probes of a down address.
	// Default DefaultBackoffMax, and never below ProbeInterval.
	BackoffMax time.Duration
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = DefaultBackend
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = c.MaxInflight
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.FailThreshold == 0 {
		c.FailThreshold = DefaultFailThreshold
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.ProbeInterval)
	}
	return c
}

// Validate reports every invalid field of c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	seen := map[string]bool{}
	for _, a := range append([]string{c.Backend}, c.Fallbacks...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("upstream address %q: %w", a, err))
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("upstream address %q listed twice", a))
		}
		seen[a] = true
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must be positive", c.Timeout))
	}
	if c.MaxInflight < 0 {
		errs = append(errs, fmt.Errorf("max in-flight %d: must be positive", c.MaxInflight))
	}
	if c.MaxIdleConns < 0 {
		errs = append(errs, fmt.Errorf("max idle conns %d: must be positive", c.MaxIdleConns))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("idle timeout %v: must be positive", c.IdleTimeout))
	}
	if c.FailThreshold < 0 {
		errs = append(errs, fmt.Errorf("fail threshold %d: must be positive", c.FailThreshold))
	}
	if c.ProbeInterval < 0 || c.ProbeTimeout < 0 {
		errs = append(errs, fmt.Errorf("probe interval %v, timeout %v: must be positive", c.ProbeInterval, c.ProbeTimeout))
	}
	if c.BackoffMax < c.ProbeInterval {
		errs = append(errs, fmt.Errorf("backoff max %v: must not be below the probe interval %v", c.BackoffMax, c.ProbeInterval))
	}
	return errors.Join(errs...)
}
