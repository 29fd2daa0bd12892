package httpserve

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// makeRoom frees a slot for a new connection from peer if a limit is
// reached, by evicting a connection of that peer (at its limit) or of the
// peer that holds the most (at the server's limit). It returns the evicted
// connection, for the caller to close outside the lock (nil when no limit
// was reached), the limit that was reached, and false when no room can be
// made.
// s.mu is held.
//
// The victim is the first evictable connection, in list order (lingering,
// then pending oldest first), that has no unread bytes waiting in the
// kernel. A pending connection with bytes waiting is one whose goroutine
// has not yet run since its data arrived: a probe that sent its whole head
// at once, about to be answered. Passing over those keeps a flood that
// re-dials as fast as the server closes its connections from evicting the
// probe in that moment. Only when every candidate has bytes waiting is the
// first of them evicted.
func (s *Server) makeRoom(peer string) (victim net.Conn, limit Limit, ok bool) {
	switch {
	case s.perPeer[peer] >= maxConnsPerPeer:
		limit = PeerLimit
	case len(s.conns) >= maxConns:
		limit = ListenerLimit
		// The peer holding the most slots pays: a flood from many
		// addresses evicts its own before a probe's single connection.
		for p, n := range s.perPeer {
			if n > s.perPeer[peer] || (n == s.perPeer[peer] && p < peer) {
				peer = p
			}
		}
	default:
		return nil, limit, true
	}
	pick := func(st *slot) bool { return st.peer == peer }
	var first *slot
	for e := s.evictable.Front(); e != nil; e = e.Next() {
		st := e.Value.(*slot)
		if !pick(st) {
			continue
		}
		if st.answered || !hasUnread(st.c) {
			s.forget(st)
			return st.c, limit, true
		}
		if first == nil {
			first = st
		}
	}
	if first == nil {
		return nil, limit, false
	}
	s.forget(first)
	return first.c, limit, true
}

// hasUnread reports whether the kernel holds received bytes of c that
// have not been read (SIOCINQ, tcp(7)). Errors count as none.
func hasUnread(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if err := rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); err != nil {
		return false
	}
	return n > 0
}

// forget frees st's slot. s.mu is held.
func (s *Server) forget(st *slot) {
	if st.gone {
		return
	}
	st.gone = true
	if st.elem != nil {
		s.evictable.Remove(st.elem)
		st.elem = nil
	}
	delete(s.conns, st.c)
	if s.perPeer[st.peer]--; s.perPeer[st.peer] <= 0 {
		delete(s.perPeer, st.peer)
	}
}

// serving moves st out of the evictable list once its head is read. It
// returns false if st was evicted meanwhile (its connection is closed).
func (s *Server) serving(st *slot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.gone {
		return false
	}
	if st.elem != nil {
		s.evictable.Remove(st.elem)
		st.elem = nil
	}
	return true
}

// lingering makes st, answered, the first to be evicted.
func (s *Server) lingering(st *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.gone && st.elem == nil {
		st.answered = true
		st.elem = s.evictable.PushFront(st)
	}
}

// peerOf returns the remote IP address of c, the key of the per-peer
// limit; connections that have none (not TCP) share one key.
func peerOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}
