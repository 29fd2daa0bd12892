package resolver

import (
	"errors"
	"fmt"

	"github.com/nodedns/nodedns/frontend/cache"
)

// Config configures a Resolver. Start from DefaultConfig. The frontend's
// flags that set it are defined in one place, frontend/config.go
// (newFlagSet), and listed in frontend/README.md.
type Config struct {
	// Cache sizes the cache and sets its TTL policy; see cache.Config for
	// each field's default.
	Cache cache.Config
	// Server is the value of the "server" label of the CoreDNS-named
	// series, in CoreDNS's form: "dns://" and the listen address. Default
	// "dns://:53".
	Server string
	// ClusterDomain is kubelet's --cluster-domain: a miss of a name in a
	// pod's first search domain also fetches the pod's next two tries
	// (search-path prefetch, search.go). Empty disables it. Default
	// "cluster.local".
	ClusterDomain string
	// DenyBelowNXDOMAIN answers NXDOMAIN, from the cache, a query of a name
	// under a Service, namespace or child of ClusterDomain cached NXDOMAIN
	// (RFC 8020; searchPath.above), instead of asking the backend. No
	// effect without ClusterDomain. Default true.
	DenyBelowNXDOMAIN bool
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Cache: cache.DefaultConfig(), Server: "dns://:53", ClusterDomain: "cluster.local", DenyBelowNXDOMAIN: true}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Cache.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := newSearchPath(c.ClusterDomain); err != nil {
		errs = append(errs, err)
	}
	if c.Server == "" {
		errs = append(errs, fmt.Errorf("server label: must not be empty"))
	}
	return errors.Join(errs...)
}
