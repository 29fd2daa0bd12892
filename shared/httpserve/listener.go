package httpserve

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// maxConns bounds the connections held at once, in every state. Scrapes
	// and probes come a few per minute; the bound exists for floods, where
	// each slot costs a goroutine, net/http's buffers and a descriptor:
	// a few MiB and 128 descriptors at most, whatever the flood.
	maxConns = 128

	// maxConnsPerPeer bounds the connections from one remote IP address,
	// so that one peer that floods evicts its own connections first, not
	// those of the kubelet or of Prometheus (when they come from another
	// address).
	maxConnsPerPeer = 32

	// acceptRetryDelay is the pause after a failed Accept (EMFILE, a
	// connection aborted before it was accepted) so that a persistent
	// error does not spin a core.
	acceptRetryDelay = 10 * time.Millisecond
)

// peerListener hands net/http its connections within the limits above.
//
// Connection slots (the choice of a victim is in makeRoom). A connection
// is pending from the accept until its request head is complete (the
// handler marks it serving), and serving until it is closed. Pending
// connections are evictable: an accepted connection that finds its peer at
// maxConnsPerPeer, or the listener at maxConns, closes the oldest pending
// connection (of that peer, or of the peer holding the most) without
// unread bytes in the kernel, and takes its slot; only when no connection
// is evictable is the new one closed instead. Refusing new connections at
// a limit, as netutil.LimitListener does, lets whoever holds the slots keep
// them for as long as the head timeout, and renew them at will: 16 idle
// connections made every probe fail. With eviction, a probe, which sends
// its head at once, completes unless more than a limit's worth of
// connections arrive in the moment between its connect and its head; idle
// and slow connections only evict one another. That moment is closed by
// deferring accepts (deferAccept): a probe reaches Accept with its head
// already waiting, and an idle flood is handed over about once a second
// per connection instead of as fast as it re-dials, so even a flood from
// the probes' own address cannot evict a probe. The head timeout bounds
// what any connection may hold without a flood behind it.
type peerListener struct {
	net.Listener
	metrics  Metrics // read-only
	deferErr error   // why accepts are not deferred (deferAccept), nil when they are

	mu        sync.Mutex
	conns     map[net.Conn]*slot // guarded by mu; the connections holding a slot
	perPeer   map[string]int     // guarded by mu; len(conns) by peer address, no zero entries
	evictable list.List          // guarded by mu; of *slot: pending ones, oldest first
}

// slot is one connection's place in the listener's accounting.
type slot struct {
	c    net.Conn      // the accepted connection, not the wrapper
	peer string        // remote IP address, the per-peer key
	elem *list.Element // guarded by peerListener.mu; in evictable while pending, else nil
	gone bool          // guarded by peerListener.mu; the slot was freed (evicted or closed)
}

// peerConn is an accepted connection; closing it frees its slot.
type peerConn struct {
	net.Conn
	l  *peerListener
	st *slot
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c.st)
	return err
}

// newPeerListener wraps l; its accepts are deferred by up to d.
func newPeerListener(l net.Listener, m Metrics, d time.Duration) *peerListener {
	pl := &peerListener{
		Listener: l,
		metrics:  m,
		conns:    make(map[net.Conn]*slot),
		perPeer:  make(map[string]int),
	}
	pl.deferErr = deferAccept(l, d)
	return pl
}

// Accept returns the next connection that finds room, evicting a pending
// one when a limit is reached. It returns an error only once the listener
// is closed: every other error is treated as temporary, since giving up
// would silently end /health.
func (pl *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := pl.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			time.Sleep(acceptRetryDelay)
			continue
		}
		st := &slot{c: c, peer: peerOf(c)}
		pl.mu.Lock()
		victim, limit, ok := pl.makeRoom(st.peer)
		if !ok {
			pl.mu.Unlock()
			c.Close() // every slot it may take is serving a request
			pl.metrics.refused(limit)
			continue
		}
		st.elem = pl.evictable.PushBack(st)
		pl.conns[c] = st
		pl.perPeer[st.peer]++
		pl.mu.Unlock()
		if victim != nil {
			victim.Close() // net/http's goroutine sees the error and ends
			pl.metrics.evicted(limit)
		}
		return &peerConn{Conn: c, l: pl, st: st}, nil
	}
}

// release frees st's slot unless it was evicted.
func (pl *peerListener) release(st *slot) {
	pl.mu.Lock()
	pl.forget(st)
	pl.mu.Unlock()
}

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
