package scenario

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// TestRunqueueWaitOfSelf: twice as many spinning threads as CPUs must
// wait for a CPU, and runqueueWait sees it.
func TestRunqueueWaitOfSelf(t *testing.T) {
	before, err := runqueueWait(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(2 * runtime.NumCPU())
	defer runtime.GOMAXPROCS(prev)
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			}
		})
	}
	wg.Wait()
	after, err := runqueueWait(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run-queue wait %v over %d spinning threads on %d CPUs", after-before, 2*runtime.NumCPU(), runtime.NumCPU())
	if after-before < 10*time.Millisecond {
		t.Errorf("run-queue wait grew by %v; want at least 10ms with twice as many spinning threads as CPUs", after-before)
	}
}

func TestReportTail(t *testing.T) {
	due := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	rep := &Report{Rows: []Row{{
		Design: "nodedns", NodeCPU: 1.5, NodeRunqueueWait: 12 * time.Millisecond,
		Load: &gen.Result{Slowest: []gen.Slow{{Due: due, Latency: 42 * time.Millisecond, Late: time.Millisecond, Queries: 4, SlowestExchange: 40 * time.Millisecond, SlowestName: "svc-1.team-a.svc.cluster.local."}}},
	}}}
	var b strings.Builder
	rep.writeTail(&b)
	for _, want := range []string{"**nodedns**: run-queue wait 12ms over 1.50 CPU s", "03:04:05.006 42.00ms, began 1.00ms late, 4 queries (0 resent), slowest exchange 40.00ms: `svc-1.team-a.svc.cluster.local.`"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tail section lacks %q:\n%s", want, b.String())
		}
	}
}
