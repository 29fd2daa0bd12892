// Package httpserve is a minimal HTTP/1.1 server for the few fixed GET
// endpoints of a nodedns process: /metrics for Prometheus, /health and
// /ready for the kubelet.
//
// It exists because of the size of the per-node frontend binary: nearly all
// of that binary is resident, its RSS target is 15 MiB, and net/http's
// server together with the TLS stack it links costs about 2 MB of it. This
// package imports neither net/http nor anything that does.
//
// What it supports: GET and HEAD, origin-form targets ("/path?query", the
// query is ignored) and absolute-form targets ("http://host/path"), exact
// path routing, HTTP/1.0 and HTTP/1.1 request lines, a request head of at
// most 16 KiB, at most 16 connections served at once. Every response
// carries Content-Type, Content-Length and "Connection: close", and the
// connection is closed after one request.
//
// What it does not support: keep-alive, pipelining, TLS, request bodies
// (a body is never read; chunked or not), chunked or streamed responses,
// methods other than GET and HEAD (405), HTTP/2, Expect: 100-continue.
package httpserve

import (
	"bytes"
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
	// maxConns bounds the connections served at once. Scrapes and probes
	// come a few per minute; more than a handful at once is a misbehaving
	// client, and each slot costs a goroutine and two buffers.
	maxConns = 16

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

// headTimeout is the per-connection deadline for reading the request head,
// and again for writing the answer once the handler has returned: 5 s, far
// above what a scraper or a probe on the node needs, short enough that idle
// connections cannot hold the 16 slots for long. A variable so that tests
// can shorten it; Serve reads it once.
var headTimeout = 5 * time.Second

// Server serves the handlers by exact path on one listener.
type Server struct {
	l       net.Listener
	routes  map[string]Handler // copied at Serve, read-only afterwards
	timeout time.Duration      // headTimeout as Serve found it

	sem  chan struct{}  // one token per connection being served; capacity maxConns
	wg   sync.WaitGroup // the accept loop and every connection being served
	done chan struct{}  // closed when wg reaches zero after the accept loop ended

	mu     sync.Mutex
	closed bool                  // guarded by mu; set by Shutdown, then no connection is added
	conns  map[net.Conn]struct{} // guarded by mu; the connections being served
}

// Serve starts serving routes (path → handler; the query string is ignored)
// on l in a goroutine and returns at once. The map is copied.
func Serve(l net.Listener, routes map[string]Handler) *Server {
	s := &Server{
		l:       l,
		routes:  maps.Clone(routes),
		timeout: headTimeout,
		sem:     make(chan struct{}, maxConns),
		done:    make(chan struct{}),
		conns:   make(map[net.Conn]struct{}),
	}
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
		select {
		case s.sem <- struct{}{}:
		default:
			c.Close() // all slots busy
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			<-s.sem
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// release forgets c and frees its slot; c is closed by then.
func (s *Server) release(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	<-s.sem
	s.wg.Done()
}
