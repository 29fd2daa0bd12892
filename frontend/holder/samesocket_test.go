package holder

import (
	"os"
	"testing"
	"time"
)

// TestHeldCopiesTakeNoShare: while a frontend runs, the holder's copies
// are the frontend's own sockets, not further members of the address's
// SO_REUSEPORT group, so every query reaches a reader. The control gives
// the holder a socket bound afresh to the same address instead: it takes
// a share of the queries and nobody reads it, which is what the holder
// must never keep beside a live frontend.
func TestHeldCopiesTakeNoShare(t *testing.T) {
	const clients = 200
	t.Run("duplicates", func(t *testing.T) {
		dir := t.TempDir()
		h, _ := startHolder(t, dir, time.Minute)
		f := startFrontend(t, dir, []string{"127.0.0.1:0"})
		waitHeld(t, h, 3)
		cs := sendQueries(t, f.srv.Addrs()[0], clients)
		if n := answered(cs, 2*time.Second); n != clients {
			t.Errorf("%d of %d queries answered with the holder's copies open", n, clients)
		}
	})
	t.Run("control: a socket of its own", func(t *testing.T) {
		dir := t.TempDir()
		h, _ := startHolder(t, dir, time.Minute)
		sup := NewSupplier(dir, []string{"127.0.0.1:0"}, nil)
		f := serveFrontend(t, NewSupplier(t.TempDir(), nil, nil), []string{"127.0.0.1:0"}, nil)
		addr := f.srv.Addrs()[0]
		fresh := reusePortUDP(t, addr)
		ff, err := fresh.File()
		if err != nil {
			t.Fatal(err)
		}
		fresh.Close()
		defer ff.Close()
		take(t, sup)
		go sup.Run(t.Context(), fileDonor([]*os.File{ff}))
		waitHeld(t, h, 1)
		cs := sendQueries(t, addr, clients)
		n := answered(cs, time.Second)
		t.Logf("%d of %d answered beside an unread member of the group", n, clients)
		if n == clients {
			t.Errorf("all %d answered: the control should lose the unread member's share, so the test above proves nothing", clients)
		}
	})
}
