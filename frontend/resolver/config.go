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
	// ClusterDomain is kubelet's --cluster-domain: the zone the backend
	// answers from memory (the kubernetes plugin), whose names pods walk
	// through their search path. It scopes SearchPrefetch,
	// DenyBelowNXDOMAIN and the cache's ClusterNegativeMaxTTL. Empty turns
	// all three off. Default "cluster.local".
	ClusterDomain string
	// SearchPrefetch makes a miss of a name in a pod's first search domain
	// also fetch the pod's next two tries (search.go). Default true.
	SearchPrefetch bool
	// DenyBelowNXDOMAIN answers NXDOMAIN, from the cache, a query of a name
	// under a Service, namespace or child of ClusterDomain cached NXDOMAIN
	// (RFC 8020; searchPath.above), instead of asking the backend. It does
	// not need SearchPrefetch; with it, the names above a walk's tries are
	// fetched after the walk is denied. Default true.
	DenyBelowNXDOMAIN bool
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Cache: cache.DefaultConfig(), Server: "dns://:53", ClusterDomain: "cluster.local", SearchPrefetch: true, DenyBelowNXDOMAIN: true}
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
