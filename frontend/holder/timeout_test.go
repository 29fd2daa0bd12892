package holder

import (
	"context"
	"net"
	"testing"
	"time"
)

// portFree reports whether addr can be bound over UDP without
// SO_REUSEPORT: no socket, held or served, is left on it.
func portFree(addr string) bool {
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

func TestHoldTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release bool          // the frontend stops cleanly
		wait    time.Duration // after its end
		free    bool          // the port is free then
	}{
		{"a dead frontend's sockets are held within the timeout", false, 100 * time.Millisecond, false},
		{"and let go past it", false, 800 * time.Millisecond, true},
		{"a clean stop lets them go at once", true, 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h, _ := startHolder(t, dir, 400*time.Millisecond)
			f := startFrontend(t, dir, []string{"127.0.0.1:0"})
			addr := f.srv.Addrs()[0]
			waitHeld(t, h, 3)
			if tc.release {
				if err := f.sup.Release(); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
			f.die()
			time.Sleep(tc.wait)
			if got := portFree(addr); got != tc.free {
				t.Errorf("%v after the frontend's end: port free %v, want %v (holder holds %d)", tc.wait, got, tc.free, h.Held())
			}
		})
	}
}

// TestOtherListenDropsHeld: a frontend with other listen addresses gets
// nothing, and the held sockets are closed: it binds its own, and the old
// ones must not sit unread beside them.
func TestOtherListenDropsHeld(t *testing.T) {
	dir := t.TempDir()
	h, _ := startHolder(t, dir, time.Minute)
	f := startFrontend(t, dir, []string{"127.0.0.1:0"})
	addr := f.srv.Addrs()[0]
	waitHeld(t, h, 3)
	f.die()
	waitFree(t, h)
	sup := NewSupplier(dir, []string{"127.0.0.2:53"}, nil)
	files, err := sup.Take(context.Background())
	if err != nil || len(files) != 0 {
		t.Fatalf("Take with other addresses: %d sockets, %v; want none", len(files), err)
	}
	defer sup.Close()
	if !portFree(addr) {
		t.Errorf("%s still bound: the old sockets are held", addr)
	}
}
