package holder

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestCrashLosesNoQueuedQuery: the sockets pass from a frontend to the
// holder and on to the next frontend over SCM_RIGHTS. The datagrams and
// the TCP connection that arrive while no frontend runs are answered by
// the next one.
func TestCrashLosesNoQueuedQuery(t *testing.T) {
	dir := t.TempDir()
	h, _ := startHolder(t, dir, time.Minute)
	first := startFrontend(t, dir, []string{"127.0.0.1:0"})
	listen := first.srv.Addrs()
	waitHeld(t, h, 3) // 2 UDP + 1 TCP

	first.die()
	queued := sendQueries(t, listen[0], 100)
	tc, err := net.DialTimeout("tcp", listen[0], time.Second)
	if err != nil {
		t.Fatalf("TCP while no frontend runs: %v (the held listener should queue it)", err)
	}
	defer tc.Close()
	conn := &dns.Conn{Conn: tc}
	if err := conn.WriteMsg(new(dns.Msg).SetQuestion("tcp.example.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := answered(queued[:1], 50*time.Millisecond); n != 0 {
		t.Fatal("a query was answered while no frontend ran")
	}

	// The same --listen as the first: port 0 there, so that the test
	// picks a free port; a restarted frontend has the same flags.
	second := startFrontend(t, dir, []string{"127.0.0.1:0"})
	if got := second.srv.Addrs(); got[0] != listen[0] {
		t.Fatalf("second frontend serves %v, want %v", got, listen)
	}
	if n := answered(queued, 2*time.Second); n != len(queued) {
		t.Errorf("%d of %d queued datagrams answered by the next frontend", n, len(queued))
	}
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.ReadMsg(); err != nil {
		t.Errorf("TCP connection queued while no frontend ran: %v", err)
	}
	waitHeld(t, h, 3)
}
