// Package httpserve is a minimal HTTP/1.1 server for the few fixed GET
// endpoints of a nodedns process: /metrics for Prometheus, /health and
// /ready for the kubelet.
//
// It exists for the per-node frontend's memory, whose RSS target is 15 MiB:
// net/http's server in its place, with the same limits, cost 2.0 MiB of
// binary, 1.1 MiB of RSS at rest and 1.6-5.6 MiB at peak, at the same CPU
// per request (README.md, `nodedns-loadtest httpcost`). This package
// imports neither net/http nor anything that does.
//
// What it supports: GET and HEAD, origin-form targets ("/path?query", the
// query is ignored) and absolute-form targets ("http://host/path"), exact
// path routing, HTTP/1.0 and HTTP/1.1 request lines, a request head of at
// most 16 KiB that must arrive within 1 s of the accept, at most 128
// connections at once and 32 from one peer address. Every response
// carries Content-Type, Content-Length and "Connection: close", and the
// connection is closed after one request.
//
// A flood of idle or slow connections cannot starve the endpoints: when a
// limit is reached, the new connection takes the slot of the oldest one
// that has not sent a complete request head (or has been answered already)
// instead of being refused, and the kernel hands a TCP connection over only
// once its first bytes have arrived, or after a second (TCP_DEFER_ACCEPT).
// See Server for why. ServeCounted counts the evictions and refusals.
//
// What it does not support: keep-alive, pipelining, TLS, request bodies
// (a body is never read; chunked or not), chunked or streamed responses,
// methods other than GET and HEAD (405), HTTP/2, Expect: 100-continue.
package httpserve

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"time"
)

// Handler writes the body of a GET into body and returns the status code
// (200, 503, ...) and the Content-Type. A handler runs once per request, on
// the connection's goroutine; a panic is answered with 500.
type Handler func(body *bytes.Buffer) (status int, contentType string)

const (
	// maxConns bounds the connections held at once, in every state. Scrapes
	// and probes come a few per minute; the bound exists for floods, where
	// each slot costs a goroutine, a 4 KiB read buffer and a descriptor:
	// about 2 MiB and 128 descriptors at most, whatever the flood.
	maxConns = 128

	// maxConnsPerPeer bounds the connections from one remote IP address,
	// so that one peer that floods evicts its own connections first, not
	// those of the kubelet or of Prometheus (when they come from another
	// address).
	maxConnsPerPeer = 32

	// maxHeadBytes bounds the bytes read for a request line and headers.
	// Prometheus and the kubelet send a few hundred bytes.
	maxHeadBytes = 16 << 10

	// acceptRetryDelay is the pause after a failed Accept (EMFILE, a
	// connection aborted before it was accepted) so that a persistent
	// error does not spin a core.
	acceptRetryDelay = 10 * time.Millisecond

	// lingerTimeout bounds how long a connection is drained after the
	// response, so that unread request bytes do not make the kernel answer
	// the close with a RST that could discard the response at the client.
	lingerTimeout = 500 * time.Millisecond
)

// headTimeout is the deadline for the whole request head, counted from the
// accept and not renewed by each byte (so a head sent one byte at a time
// gains nothing): 1 s. The kubelet and Prometheus write their request as
// soon as the connection is up, a few hundred bytes in one segment, so on
// a node or across a cluster network the head arrives within milliseconds;
// kubelet's own probe timeout is 1 s by default. A variable so that tests
// can shorten it; Serve reads it once.
var headTimeout = 1 * time.Second

// writeTimeout is the deadline for writing the answer once the handler has
// returned. Only a peer that sent a complete head gets this far, within
// its share of the slots. A variable for tests; Serve reads it once.
var writeTimeout = 5 * time.Second

// Server serves the handlers by exact path on one listener.
//
// Connection slots (the choice of a victim is in makeRoom). A connection is pending from the accept until its
// request head is complete, serving while the handler runs and the answer
// is written, and lingering while the close drains. Pending and lingering
// connections are evictable: an accepted connection that finds its peer at
// maxConnsPerPeer, or the server at maxConns, closes the first evictable
// connection (of that peer, or of anyone) and takes its slot; only when no
// connection is evictable is the new one closed instead. The first
// evictable connection is a lingering one (it has its answer) if any, else
// the oldest pending one without unread bytes in the kernel. Refusing new connections at a limit, as an
// ordinary server does, lets whoever holds the slots keep them for as long
// as the head timeout, and renew them at will: 16 idle connections made
// every probe fail. With eviction, a probe, which sends its head at once,
// completes unless more than a limit's worth of connections arrive in the
// moment between its connect and its head; idle and slow connections only
// evict one another. That moment is closed by deferring accepts
// (deferAccept): a probe reaches Accept with its head already waiting, and
// an idle flood is handed over about once a second per connection instead
// of as fast as it re-dials, so even a flood from the probes' own address
// cannot evict a probe. The head timeout bounds what any connection may
// hold without a flood behind it.
type Server struct {
	l            net.Listener
	routes       map[string]Handler // copied at Serve, read-only afterwards
	headTimeout  time.Duration      // headTimeout as Serve found it
	writeTimeout time.Duration      // writeTimeout as Serve found it
	metrics      Metrics            // read-only after Serve
	deferErr     error              // why accepts are not deferred (deferAccept), nil when they are

	wg   sync.WaitGroup // the accept loop and every connection goroutine
	done chan struct{}  // closed when wg reaches zero after the accept loop ended

	mu        sync.Mutex
	closed    bool               // guarded by mu; set by Shutdown, then no connection is added
	conns     map[net.Conn]*slot // guarded by mu; the connections holding a slot
	perPeer   map[string]int     // guarded by mu; len(conns) by peer address, no zero entries
	evictable list.List          // guarded by mu; of *slot: lingering ones, then pending ones oldest first
}

// slot is one connection's place in the server's accounting.
type slot struct {
	c        net.Conn
	peer     string        // remote IP address, the per-peer key
	elem     *list.Element // guarded by Server.mu; in evictable while pending or lingering, else nil
	gone     bool          // guarded by Server.mu; the slot was freed (evicted or released)
	answered bool          // guarded by Server.mu; lingering after its answer
}

// Serve starts serving routes (path → handler; the query string is ignored)
// on l in a goroutine and returns at once. The map is copied. It counts
// nothing; ServeCounted does.
func Serve(l net.Listener, routes map[string]Handler) *Server {
	return ServeCounted(l, routes, Metrics{})
}

// ServeCounted is Serve, counting the connections evicted and refused at
// the limits in m.
func ServeCounted(l net.Listener, routes map[string]Handler, m Metrics) *Server {
	s := &Server{
		l:            l,
		routes:       maps.Clone(routes),
		headTimeout:  headTimeout,
		writeTimeout: writeTimeout,
		metrics:      m,
		done:         make(chan struct{}),
		conns:        make(map[net.Conn]*slot),
		perPeer:      make(map[string]int),
	}
	s.deferErr = deferAccept(l, s.headTimeout)
	// The accept loop holds one count of wg until it ends, so the counts
	// added for connections never start from zero while Wait runs.
	s.wg.Add(1)
	go s.acceptLoop()
	go func() {
		s.wg.Wait()
		close(s.done)
	}()
	return s
}

// Addr returns the listener's address.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Shutdown closes the listener, then waits for the connections being served
// to finish, until ctx ends; then it closes them. It returns ctx.Err() if it
// had to cut connections, otherwise the error of closing the listener (nil
// when it was already closed). It does not wait for a handler that is still
// running on a cut connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	lerr := s.l.Close()
	if errors.Is(lerr, net.ErrClosed) {
		lerr = nil
	}
	select {
	case <-s.done:
		return lerr
	case <-ctx.Done():
	}
	s.mu.Lock()
	cut := len(s.conns)
	for c := range s.conns {
		c.Close() // the serving goroutine sees the error and cleans up
	}
	s.mu.Unlock()
	if cut == 0 {
		return lerr
	}
	return ctx.Err()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.isClosed() {
				return
			}
			// Every other error is treated as temporary: the server has no
			// one to report to, and giving up would silently end /health.
			time.Sleep(acceptRetryDelay)
			continue
		}
		st := &slot{c: c, peer: peerOf(c)}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		victim, limit, ok := s.makeRoom(st.peer)
		if !ok {
			s.mu.Unlock()
			c.Close() // every slot it may take is serving a request
			s.metrics.refused(limit)
			continue
		}
		st.elem = s.evictable.PushBack(st)
		s.conns[c] = st
		s.perPeer[st.peer]++
		s.wg.Add(1)
		s.mu.Unlock()
		if victim != nil {
			victim.Close() // its goroutine sees the error and ends
			s.metrics.evicted(limit)
		}
		go s.serveConn(st)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// release frees st's slot unless it was evicted, and ends its goroutine's
// count; st's connection is closed by then.
func (s *Server) release(st *slot) {
	s.mu.Lock()
	s.forget(st)
	s.mu.Unlock()
	s.wg.Done()
}
