package holder

import (
	"testing"
	"time"
)

// TestHolderRestartIsSuppliedAgain: a holder that restarts holds nothing;
// the running frontend notices the end of its lease and gives its sockets
// to the new holder, which then carries them across a crash.
func TestHolderRestartIsSuppliedAgain(t *testing.T) {
	dir := t.TempDir()
	listen := []string{"127.0.0.1:0"}
	h, stop := startHolder(t, dir, time.Minute)
	f := startFrontend(t, dir, listen)
	waitHeld(t, h, 3)
	stop()
	if n := answered(sendQueries(t, f.srv.Addrs()[0], 20), 2*time.Second); n != 20 {
		t.Fatalf("%d of 20 answered after the holder stopped: the frontend's sockets must not depend on it", n)
	}
	h2, _ := startHolder(t, dir, time.Minute)
	waitHeld(t, h2, 3)

	addr := f.srv.Addrs()[0]
	f.die()
	queued := sendQueries(t, addr, 20)
	startFrontend(t, dir, listen)
	if n := answered(queued, 2*time.Second); n != len(queued) {
		t.Errorf("%d of %d queued across the crash answered after a holder restart", n, len(queued))
	}
}

// TestFrontendBackWhileHolderDown: a frontend that starts while the holder
// is down binds afresh (nothing held its sockets: they died with the
// frontend and the holder) and supplies the holder once it is up.
func TestFrontendBackWhileHolderDown(t *testing.T) {
	dir := t.TempDir()
	listen := []string{"127.0.0.1:0"}
	f := startFrontend(t, dir, listen)
	if n := answered(sendQueries(t, f.srv.Addrs()[0], 10), 2*time.Second); n != 10 {
		t.Fatalf("%d of 10 answered without a holder", n)
	}
	start := time.Now()
	h, _ := startHolder(t, dir, time.Minute)
	waitHeld(t, h, 3)
	t.Logf("holder supplied %v after it started", time.Since(start).Round(time.Millisecond))

	addr := f.srv.Addrs()[0]
	f.die()
	queued := sendQueries(t, addr, 20)
	startFrontend(t, dir, listen)
	if n := answered(queued, 2*time.Second); n != len(queued) {
		t.Errorf("%d of %d queued across the crash answered", n, len(queued))
	}
}
