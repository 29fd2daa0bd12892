package resolver

import (
	"errors"
	"fmt"
	"time"

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
	// AnswerTimeout bounds how long a miss waits for the backend: past
	// it, the miss is answered stale when an expired answer is cached,
	// else SERVFAIL (not cached), and the exchange goes on to fill the
	// cache for the next queries. Every waiter of a shared exchange gets
	// its own bound. Default DefaultAnswerTimeout; it must be positive.
	AnswerTimeout time.Duration
	// PassClient passes the address of the pod whose miss a backend query
	// is for to the backend, in the EDNS0 option of shared/clientopt; the
	// backend's nodedns_client plugin makes it the query's source. Only
	// the backend gets it (never a fallback). Default false.
	PassClient bool
}

// DefaultAnswerTimeout is Config.AnswerTimeout's default: a stub resolver
// gives up its first attempt after 5s (glibc's RES_TIMEOUT; musl's is
// 5s over all its tries), so an answer within 2s reaches it even after a
// retry from its side and a slow network, and a name the backend takes
// longer than that to resolve (a slow authoritative server, the forward
// plugin trying a second upstream) is cached by the exchange that goes
// on for the client's next try. It is a little over the client response
// timer of RFC 8767 (1.8s), after which a stale answer is served instead.
const DefaultAnswerTimeout = 2 * time.Second

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Cache: cache.DefaultConfig(), Server: "dns://:53", ClusterDomain: "cluster.local", SearchPrefetch: true, DenyBelowNXDOMAIN: true,
		AnswerTimeout: DefaultAnswerTimeout}
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
	if c.AnswerTimeout <= 0 {
		errs = append(errs, fmt.Errorf("answer timeout %v: must be positive", c.AnswerTimeout))
	}
	if c.Server == "" {
		errs = append(errs, fmt.Errorf("server label: must not be empty"))
	}
	return errors.Join(errs...)
}
