package gen

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// Defaults of Config, those of glibc's stub resolver in a Kubernetes pod
// (resolv.conf "options ndots:5", timeout:5 and attempts:2 are glibc's
// defaults) and of the load.
const (
	DefaultNdots         = 5
	DefaultTimeout       = 5 * time.Second
	DefaultAttempts      = 2
	DefaultClusterDomain = "cluster.local"
	DefaultPods          = 50
	DefaultDuration      = 10 * time.Second
	// DefaultMaxInflight bounds the open loop's outstanding lookups: with a
	// 5s timeout and 2 attempts, 10,000 holds 1,000 lookups/s of a dead
	// server for 10s before lookups are skipped (and counted as such).
	DefaultMaxInflight = 10000
)

// Config is one load run. Server, Mix and either Rate or Pods are needed;
// DefaultConfig fills the rest.
type Config struct {
	// Server is the nameserver, host:port (resolv.conf's nameserver).
	Server string
	// Namespace is the pods' namespace; it makes the first search domain.
	Namespace string
	// ClusterDomain is kubelet's --cluster-domain.
	ClusterDomain string
	// Search overrides the search list (default: NS.svc.CD svc.CD CD).
	Search []string
	// Ndots: names with fewer dots are tried with the search list first.
	Ndots int
	// Timeout is how long one attempt waits for its answers.
	Timeout time.Duration
	// Attempts is how many times a query is sent before the lookup fails.
	Attempts int
	// NoAAAA sends only A queries (single-stack IPv4 applications);
	// default is A and AAAA in parallel, as getaddrinfo(AF_UNSPEC) does.
	NoAAAA bool
	// Rate is the open loop's lookups per second; 0 runs closed-loop.
	Rate int
	// Pods is the number of simulated pods. Closed loop: each does one
	// lookup after the other. Open loop: lookups go to pods round-robin.
	// Pods take their source address from SourceIPs round-robin.
	Pods int
	// MaxInflight bounds the open loop's outstanding lookups; lookups due
	// while it is reached are skipped and counted.
	MaxInflight int
	// Duration of the run.
	Duration time.Duration
	// Mix draws the names looked up.
	Mix *Mix
	// SourceIPs are the pods' addresses (default: the kernel chooses).
	SourceIPs []netip.Addr
	// Seed makes the names drawn reproducible (0: random).
	Seed uint64
	// Progress receives one line per second (nil: none).
	Progress io.Writer
}

// DefaultConfig returns a closed-loop configuration with glibc's defaults,
// the built-in "default" mix and the built-in namespace.
func DefaultConfig() Config {
	m, _ := ParseMix("default")
	return Config{
		Namespace:     BuiltinNamespace,
		ClusterDomain: DefaultClusterDomain,
		Ndots:         DefaultNdots,
		Timeout:       DefaultTimeout,
		Attempts:      DefaultAttempts,
		Pods:          DefaultPods,
		MaxInflight:   DefaultMaxInflight,
		Duration:      DefaultDuration,
		Mix:           m,
	}
}

// SearchList returns the search domains in order, each with a trailing dot.
func (c Config) SearchList() []string {
	s := c.Search
	if s == nil {
		s = []string{c.Namespace + ".svc." + c.ClusterDomain, "svc." + c.ClusterDomain, c.ClusterDomain}
	}
	out := make([]string, 0, len(s))
	for _, d := range s {
		out = append(out, strings.TrimSuffix(d, ".")+".")
	}
	return out
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if _, err := netip.ParseAddrPort(c.Server); err != nil {
		errs = append(errs, fmt.Errorf("server %q: want IP:port: %w", c.Server, err))
	}
	if c.Search == nil && (c.Namespace == "" || c.ClusterDomain == "") {
		errs = append(errs, errors.New("namespace and cluster domain make the search list: both needed"))
	}
	if c.Ndots < 0 || c.Ndots > 15 {
		errs = append(errs, fmt.Errorf("ndots %d: resolv.conf allows 0-15", c.Ndots))
	}
	if c.Timeout <= 0 || c.Attempts < 1 {
		errs = append(errs, fmt.Errorf("timeout %v and attempts %d: need > 0 and >= 1", c.Timeout, c.Attempts))
	}
	if c.Rate < 0 || c.Pods < 1 || c.MaxInflight < 1 {
		errs = append(errs, fmt.Errorf("rate %d, pods %d, max inflight %d: need rate >= 0, the others >= 1", c.Rate, c.Pods, c.MaxInflight))
	}
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %v: need > 0", c.Duration))
	}
	if c.Mix == nil {
		errs = append(errs, errors.New("no mix"))
	}
	return errors.Join(errs...)
}
