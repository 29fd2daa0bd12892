package holder

import (
	"net"
	"testing"
	"time"
)

// TestGarbageKeepsHolding: a peer that speaks no protocol is dropped; the
// holder keeps what it holds and serves the next frontend.
func TestGarbageKeepsHolding(t *testing.T) {
	dir := t.TempDir()
	h, _ := startHolder(t, dir, time.Minute)
	listen := []string{"127.0.0.1:0"}
	f := startFrontend(t, dir, listen)
	addr := f.srv.Addrs()[0]
	waitHeld(t, h, 3)
	f.die()
	waitFree(t, h)
	for _, msgs := range [][]string{
		{"GET / HTTP/1.0"},
		{""},
		{"hello 127.0.0.1:0", "end 7"},
		{"hello 127.0.0.1:0", "files"},
		{"hello 127.0.0.1:0", "nonsense"},
	} {
		c, err := net.Dial("unixpacket", Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			_, _ = c.Write([]byte(m))
		}
		time.Sleep(20 * time.Millisecond)
		c.Close()
	}
	// A bad set of sockets replaces nothing: the dead frontend's are held.
	waitHeld(t, h, 3)
	queued := sendQueries(t, addr, 10)
	startFrontend(t, dir, listen)
	if n := answered(queued, 2*time.Second); n != 10 {
		t.Errorf("%d of 10 queued answered after garbage", n)
	}
}
