package resolver

import (
	"errors"
	"fmt"

	"github.com/nodedns/nodedns/frontend/cache"
)

// Config configures a Resolver. Start from DefaultConfig.
//
// The frontend's flags map onto it as follows (see README.md):
//
//	--cache-size=10000        Cache.Size
//	--negative-cache-size=2500 Cache.NegativeSize
//	--min-ttl=0s              Cache.MinTTL
//	--max-ttl=1h              Cache.MaxTTL
//	--negative-max-ttl=30m    Cache.NegativeMaxTTL
//	--servfail-ttl=5s         Cache.ServfailTTL
//	--serve-stale=1h          Cache.ServeStale
//	--prefetch=2              Cache.PrefetchHits
type Config struct {
	// Cache sizes the cache and sets its TTL policy; see cache.Config for
	// each field's default.
	Cache cache.Config
	// Server is the value of the "server" label of the CoreDNS-named
	// series, in CoreDNS's form: "dns://" and the listen address. Default
	// "dns://:53".
	Server string
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Cache: cache.DefaultConfig(), Server: "dns://:53"}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Cache.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Server == "" {
		errs = append(errs, fmt.Errorf("server label: must not be empty"))
	}
	return errors.Join(errs...)
}
