package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// StaleTTL caps the TTLs of an answer served stale (RFC 8767 §4: 30 seconds).
const StaleTTL = 30

// Config sets the cache's capacities and TTL policy. Start from
// DefaultConfig: a zero duration or size disables the feature it sizes.
type Config struct {
	// Size is the maximum number of positive answers (NOERROR with
	// records). Default 10000. Rounded up to a multiple of the shard count.
	Size int
	// NegativeSize is the maximum number of negative answers (NXDOMAIN,
	// NODATA) and cached SERVFAILs. Default 2500; 0 disables negative
	// caching.
	NegativeSize int
	// MaxEntrySize is the largest packed answer, in bytes, that is cached;
	// larger ones are answered but not stored. With Size and NegativeSize it
	// bounds the cache's memory. Default 1232 (the EDNS size of DNS Flag Day
	// 2020, which nearly all answers fit).
	MaxEntrySize int
	// MinTTL raises shorter TTLs. Default 0: a TTL of 0 means "do not cache"
	// (RFC 1035 §3.2.1) and is honoured.
	MinTTL time.Duration
	// MaxTTL lowers longer TTLs of positive answers. Default 1h.
	MaxTTL time.Duration
	// NegativeMaxTTL lowers the TTL of negative answers, which is otherwise
	// min(SOA TTL, SOA MINIMUM) (RFC 2308 §5). Default 30m.
	NegativeMaxTTL time.Duration
	// ClusterNegativeMaxTTL lowers further the TTL of negative answers for
	// names at or under ClusterDomain, which the backend answers from the
	// API server's objects: a Service, namespace or endpoint created under
	// a name denied is then found within this time, however the denial came
	// to be cached (asked by a pod, prefetched, or a cut that denies the
	// names under it, RFC 8020). NodeLocal DNSCache keeps the cluster
	// domain's denials as long. Default 5s; 0 caches none of them.
	ClusterNegativeMaxTTL time.Duration
	// ClusterDomain is the zone ClusterNegativeMaxTTL applies to, a domain
	// name ("cluster.local"); empty: none. The resolver sets it from its
	// own ClusterDomain.
	ClusterDomain string
	// ServfailTTL is how long a SERVFAIL from the backend is cached
	// (RFC 2308 §7.1 allows up to 5 minutes). Default 5s; 0 disables.
	ServfailTTL time.Duration
	// ServeStale is how long past expiry an answer is kept to be served
	// when the backend fails (RFC 8767). Default 1h; 0 disables.
	ServeStale time.Duration
	// PrefetchHits is how many hits since insertion make an entry whose
	// remaining TTL is under 10% of its original TTL eligible for a
	// background refresh. Default 2; 0 disables prefetching.
	PrefetchHits int
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Size:                  10000,
		NegativeSize:          2500,
		MaxEntrySize:          1232,
		MinTTL:                0,
		MaxTTL:                time.Hour,
		NegativeMaxTTL:        30 * time.Minute,
		ClusterNegativeMaxTTL: 5 * time.Second,
		ServfailTTL:           5 * time.Second,
		ServeStale:            time.Hour,
		PrefetchHits:          2,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("cache size %d: must be at least 1", c.Size))
	}
	if c.NegativeSize < 0 {
		errs = append(errs, fmt.Errorf("negative cache size %d: must not be negative", c.NegativeSize))
	}
	if c.MaxEntrySize < 512 || c.MaxEntrySize > 65535 {
		errs = append(errs, fmt.Errorf("max entry size %d: must be in [512, 65535]", c.MaxEntrySize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"min TTL", c.MinTTL}, {"max TTL", c.MaxTTL}, {"negative max TTL", c.NegativeMaxTTL}, {"cluster negative max TTL", c.ClusterNegativeMaxTTL}, {"SERVFAIL TTL", c.ServfailTTL}, {"serve-stale", c.ServeStale}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, d.v))
		}
		if d.v%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s %v: must be whole seconds (TTLs are seconds)", d.name, d.v))
		}
		if d.v > 1<<31*time.Second {
			errs = append(errs, fmt.Errorf("%s %v: over the 2^31 s TTL limit (RFC 2181 §8)", d.name, d.v))
		}
	}
	if _, ok := dns.IsDomainName(c.ClusterDomain); c.ClusterDomain != "" && !ok {
		errs = append(errs, fmt.Errorf("cluster domain %q: not a domain name", c.ClusterDomain))
	}
	if c.MaxTTL < c.MinTTL {
		errs = append(errs, fmt.Errorf("max TTL %v is below min TTL %v", c.MaxTTL, c.MinTTL))
	}
	if c.ServfailTTL > 5*time.Minute {
		errs = append(errs, fmt.Errorf("SERVFAIL TTL %v: over the 5m limit of RFC 2308 §7.1", c.ServfailTTL))
	}
	if c.PrefetchHits < 0 {
		errs = append(errs, fmt.Errorf("prefetch hits %d: must not be negative", c.PrefetchHits))
	}
	return errors.Join(errs...)
}
