package nodenet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Presence tells instances of the frontend on one node about each other
// through a lock file (on a hostPath shared by every instance): each running
// instance holds a shared flock on it. An instance that stops removes the
// node's rules and interface only when it can then take the lock
// exclusively, that is when no other instance is running; the kernel drops
// the locks of a crashed process, so a SIGKILL leaves nothing stale. The
// last instance's teardown keeps the release table (releasetable.go) on
// purpose: it answers the node's DNS through kube-dns once no instance
// runs, after uninstall too.
type Presence struct {
	f *os.File // open while present; nil after Leave
}

// presencePoll is how often Join retries while a stopping instance holds the
// lock exclusively during its teardown (a few hundred milliseconds).
const presencePoll = 50 * time.Millisecond

// Join takes a shared lock on path (creating it and its directory),
// waiting while a stopping instance tears down.
func Join(ctx context.Context, path string) (*Presence, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("presence lock: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("presence lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return &Presence{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("presence lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(presencePoll):
		}
	}
}

// Leave gives up this instance's presence. It reports whether this was the
// last instance on the node; if so, the caller holds the lock exclusively
// until it calls release, so that an instance starting meanwhile waits for
// the teardown to finish before it installs anything.
func (p *Presence) Leave() (last bool, release func()) {
	f := p.f
	p.f = nil
	if f == nil {
		return false, func() {}
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return false, func() {}
	}
	return true, func() { f.Close() }
}
