package difftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/proctest"
	"github.com/nodedns/nodedns/testbed"
)

// serviceCIDRs makes the testbed's Services dual-stack.
const serviceCIDRs = testbed.ServiceCIDR + ",fd00:10:96::/112"

// clusterDomain is the chart's default clusterDomain.
const clusterDomain = "cluster.local"

// env is what every Corefile shape shares: the control plane, the cluster
// state, the spy upstream and the binaries.
type env struct {
	tb       *testbed.Testbed
	cluster  *cluster
	spy      *spy
	gen      *generator
	backend  string // nodedns-backend binary
	frontend string // nodedns-frontend binary

	mu     sync.Mutex
	hist   *history // the running shape's, where cluster changes are recorded
	rounds int      // rounds of cluster changes so far
}

var (
	sharedMu sync.Mutex
	shared   *env
)

// stopShared stops what sharedEnv started; TestMain calls it.
func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		return
	}
	shared.spy.Close()
	if err := shared.tb.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "difftest: stop testbed:", err)
	}
	shared = nil
}

// buildBinary returns $envName if set, else pkg built by proctest.Build
// (incremental with Go's build cache), so that a stale bin/ is never
// tested by `go test`.
func buildBinary(t testing.TB, envName, pkg, name string) string {
	if b := os.Getenv(envName); b != "" {
		return b
	}
	return proctest.Build(t, pkg, name)
}

// sharedEnv starts, once per test process, the testbed with the cluster
// state, the spy and the binaries. It skips t where the testbed cannot
// run (not root, no etcd): testbed.Unavailable.
func sharedEnv(t testing.TB) *env {
	t.Helper()
	if r := testbed.Unavailable(); r != "" {
		t.Skip("testbed: " + r)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		return shared
	}
	be := buildBinary(t, "NODEDNS_BACKEND_BIN", "github.com/nodedns/nodedns/backend", "nodedns-backend")
	fe := buildBinary(t, "NODEDNS_FRONTEND_BIN", "github.com/nodedns/nodedns/frontend", "nodedns-frontend")
	tb, err := testbed.Start(context.Background(), testbed.Options{
		ExtraAPIServerArgs: []string{"--service-cluster-ip-range=" + serviceCIDRs},
		Logf:               t.Logf,
	})
	if err != nil {
		t.Fatalf("start testbed: %v", err)
	}
	e := &env{tb: tb, backend: be, frontend: fe, gen: &generator{domain: clusterDomain}}
	ok := false
	defer func() {
		if !ok {
			tb.Stop()
		}
	}()
	e.cluster = &cluster{c: tb.Client(), hist: func(at time.Time) {
		e.mu.Lock()
		h := e.hist
		e.mu.Unlock()
		if h != nil {
			h.mutated(at)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.cluster.populate(ctx); err != nil {
		t.Fatalf("populate the cluster: %v", err)
	}
	e.gen.setReverse(e.cluster.reverseNames())
	if e.spy, err = startSpy(); err != nil {
		t.Fatalf("start the spy upstream: %v", err)
	}
	ok = true
	shared = e
	return e
}

// seed is the generator's seed: $NODEDNS_DIFFTEST_SEED, else random (and
// logged, so that a failing run can be repeated).
func seed(t testing.TB) uint64 {
	var s uint64
	if v := os.Getenv("NODEDNS_DIFFTEST_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &s); err != nil {
			t.Fatalf("NODEDNS_DIFFTEST_SEED=%q: %v", v, err)
		}
	} else {
		s = rand.Uint64()
	}
	t.Logf("seed %d (NODEDNS_DIFFTEST_SEED=%d repeats it)", s, s)
	return s
}
