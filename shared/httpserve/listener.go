package httpserve

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// deferAccept asks the kernel to hand l's connections to Accept only once
// their first bytes have arrived, or after about d (TCP_DEFER_ACCEPT,
// tcp(7); Linux counts it in SYN-ACK retransmissions, so 1 s means one).
//
// Why: a flood that re-dials each connection as soon as the server closes
// it cycles the slots of its peer address faster than a probe from that
// same address can send its head, and the slots cannot tell the two apart
// at the accept. Deferred, a probe, which writes its head as soon as it is
// connected, reaches Accept with its head already in the kernel (makeRoom
// passes over connections with unread bytes), while an idle connection
// waits in the kernel's queue of half-open connections, holding neither a
// descriptor nor a slot, so the flood re-dials about once per d instead of
// once per eviction. A connection that sends nothing is still accepted
// after d, and then has the head timeout like any other.
//
// Listeners that are not TCP, and kernels that refuse the option, are
// served as before; the error says which.
func deferAccept(l net.Listener, d time.Duration) error {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return fmt.Errorf("defer accept on %s: not a socket listener", l.Addr())
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("defer accept on %s: %w", l.Addr(), err)
	}
	secs := max(1, int((d+time.Second-1)/time.Second))
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, secs)
	}); err != nil {
		return fmt.Errorf("defer accept on %s: %w", l.Addr(), err)
	}
	if serr != nil {
		return fmt.Errorf("defer accept on %s: setsockopt TCP_DEFER_ACCEPT %d: %w", l.Addr(), secs, serr)
	}
	return nil
}
