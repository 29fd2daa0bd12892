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
	// address. Loopback answers in microseconds and the backend's own
	// forwarders give up after a few seconds, so 2s only expires for a hung
	// or black-holed peer, and still leaves the caller time for a fallback.
	DefaultTimeout = 2 * time.Second
	// DefaultMaxInflight bounds concurrent upstream exchanges (after
	// coalescing), like CoreDNS forward's max_concurrent.
	DefaultMaxInflight = 1000
	// DefaultMaxIdleConns bounds the idle connections kept per address.
	DefaultMaxIdleConns = 32
	// DefaultIdleTimeout closes a connection left idle this long. It stays
	// below CoreDNS's TCP idle timeout (10s), so that the frontend, not the
	// backend, closes idle connections and a pooled connection is rarely
	// found closed under a query.
	DefaultIdleTimeout = 5 * time.Second
	// DefaultFailThreshold is how many consecutive failed attempts mark an
	// address down (CoreDNS forward's max_fails uses the same value).
	DefaultFailThreshold = 2
	// DefaultBackoffMin and DefaultBackoffMax bound the time a down address
	// is skipped before one query tries it again; the wait doubles on each
	// failed try.
	DefaultBackoffMin = 1 * time.Second
	DefaultBackoffMax = 30 * time.Second
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
	// MaxIdleConns bounds the idle connections kept per address.
	// Default DefaultMaxIdleConns.
	MaxIdleConns int
	// IdleTimeout closes connections idle this long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// FailThreshold is the number of consecutive failed attempts that mark
	// an address down. Default DefaultFailThreshold.
	FailThreshold int
	// BackoffMin and BackoffMax bound how long a down address is skipped.
	// Defaults DefaultBackoffMin and DefaultBackoffMax.
	BackoffMin time.Duration
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
		c.MaxIdleConns = DefaultMaxIdleConns
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.FailThreshold == 0 {
		c.FailThreshold = DefaultFailThreshold
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
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
	if c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("backoff %v..%v: need 0 < min <= max", c.BackoffMin, c.BackoffMax))
	}
	return errors.Join(errs...)
}
