package holder

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

// TestTwoFrontendsRace: two frontends ask for the held sockets at once.
// One gets them; the other is told ErrBusy, binds afresh beside it, and
// supplies the holder once the first dies, which closes the first's
// copies: none is left unread in the SO_REUSEPORT group, so every query
// to the port is answered by the survivor.
func TestTwoFrontendsRace(t *testing.T) {
	dir := t.TempDir()
	listen := []string{"127.0.0.1:0"}
	h, _ := startHolder(t, dir, time.Minute)
	dead := startFrontend(t, dir, listen)
	addr := dead.srv.Addrs()[0]
	waitHeld(t, h, 3)
	dead.die()
	waitFree(t, h)

	type taken struct {
		sup   *Supplier
		files []*os.File
		err   error
	}
	var takes [2]taken
	var wg sync.WaitGroup
	for i := range takes {
		wg.Go(func() {
			sup := NewSupplier(dir, listen, nil)
			files, err := sup.Take(context.Background())
			takes[i] = taken{sup, files, err}
		})
	}
	wg.Wait()
	var winner, loser *taken
	for i := range takes {
		switch {
		case takes[i].err == nil && len(takes[i].files) == 3:
			winner = &takes[i]
		case errors.Is(takes[i].err, ErrBusy):
			loser = &takes[i]
		}
	}
	if winner == nil || loser == nil {
		t.Fatalf("want one with the 3 sockets and one ErrBusy, got %d sockets (%v) and %d (%v)",
			len(takes[0].files), takes[0].err, len(takes[1].files), takes[1].err)
	}
	first := serveFrontend(t, winner.sup, listen, winner.files)
	if got := first.srv.Addrs()[0]; got != addr {
		t.Fatalf("the winner serves %s, want the held %s", got, addr)
	}
	// The loser binds afresh on the same port, beside the winner.
	second := serveFrontend(t, loser.sup, []string{addr}, nil)
	waitHeld(t, h, 3)

	first.die()
	// Within retryInterval the survivor holds the lease and its sockets
	// replace the dead one's in the holder.
	deadline := time.Now().Add(3 * time.Second)
	for {
		if n := answered(sendQueries(t, addr, 100), time.Second); n == 100 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d of 100 answered 3s after the winner died: its copies are still held unread", n)
		}
	}
	if second.h.served.Load() == 0 {
		t.Error("the survivor answered nothing")
	}
}
