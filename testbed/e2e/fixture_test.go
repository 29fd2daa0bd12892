package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// A cluster shared by the tests of the kubeadm path
// (TestHelmInstallReplacesCoreDNS, TestMigrationFromKubeadmCoreDNS,
// TestHelmUninstallRestoresCoreDNS): each real-node cluster costs a minute
// or more to start, so the three run in turn on one, each step continuing
// where the one before left it. TestMain stops it once every test has run.

// sharedTB is the testing.TB the shared cluster was started with: the
// first test that needed it. Its Cleanup is deferred to TestMain, and its
// Logf goes to the test running now, so that the cluster outlives the
// test that started it.
type sharedTB struct {
	testing.TB
	mu       sync.Mutex
	cur      testing.TB // the test running now, or nil
	failed   bool       // some test using the cluster failed
	cleanups []func()
}

func (s *sharedTB) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *sharedTB) Logf(format string, args ...any) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		cur.Logf(format, args...)
		return
	}
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (s *sharedTB) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed || (s.cur != nil && s.cur.Failed())
}

// use makes t the test the cluster reports to until t ends.
func (s *sharedTB) use(t *testing.T) {
	s.mu.Lock()
	s.cur = t
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cur = nil
		s.failed = s.failed || t.Failed()
	})
}

// stop runs the deferred cleanups, last registered first.
func (s *sharedTB) stop() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

var shared struct {
	mu sync.Mutex
	tb *sharedTB
}

// stopShared stops the shared cluster, if one runs.
func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.tb != nil {
		shared.tb.stop()
	}
	shared.tb, kubeadmShared = nil, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopShared()
	os.Exit(code)
}
