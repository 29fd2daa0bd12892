// Package httpserve serves the few fixed GET endpoints of a nodedns
// process: /metrics for Prometheus, /health and /ready for the kubelet. It
// is net/http's server behind a listener that shares connection slots
// fairly between peers, so that a neighbour's flood of idle or slow
// connections cannot starve the probes.
//
// The server: GET and HEAD (405 otherwise), exact path routing (the query
// is ignored), a request head of at most 16 KiB (net/http's
// MaxHeaderBytes) that must arrive within 1 s of the accept
// (ReadHeaderTimeout, not renewed by each byte), 5 s to write the answer,
// no keep-alive: every response carries Content-Type, Content-Length and
// "Connection: close". A handler's panic is answered with 500.
//
// The listener (listener.go, slots.go): at most 128 connections at once
// and 32 from one peer address. When a limit is reached, the new
// connection takes the slot of the oldest one that has not sent a complete
// request head, instead of being refused, and the kernel hands a TCP
// connection over only once its first bytes have arrived, or after a
// second (TCP_DEFER_ACCEPT). See peerListener for why. ServeCounted counts
// the evictions and refusals.
package httpserve

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Handler writes the body of a GET into body and returns the status code
// (200, 503, ...) and the Content-Type. A handler runs once per request, on
// the connection's goroutine; a panic is answered with 500.
type Handler func(body *bytes.Buffer) (status int, contentType string)

// maxHeadBytes bounds the bytes of a request line and headers (net/http
// reads up to 4 KiB more before it answers 431). Prometheus and the
// kubelet send a few hundred bytes.
const maxHeadBytes = 16 << 10

// headTimeout is the deadline for the whole request head, counted from the
// accept and not renewed by each byte (so a head sent one byte at a time
// gains nothing): 1 s. The kubelet and Prometheus write their request as
// soon as the connection is up, a few hundred bytes in one segment, so on
// a node or across a cluster network the head arrives within milliseconds;
// kubelet's own probe timeout is 1 s by default. A variable so that tests
// can shorten it; Serve reads it once.
var headTimeout = 1 * time.Second

// writeTimeout is the deadline for writing the answer once the head is
// read. Only a peer that sent a complete head gets this far, within its
// share of the slots. A variable for tests; Serve reads it once.
var writeTimeout = 5 * time.Second

// Server serves the handlers by exact path on one listener.
type Server struct {
	hs     *http.Server
	pl     *peerListener
	routes map[string]Handler // copied at Serve, read-only afterwards
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
	s := &Server{pl: newPeerListener(l, m, headTimeout), routes: maps.Clone(routes)}
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: headTimeout,
		WriteTimeout:      writeTimeout,
		MaxHeaderBytes:    maxHeadBytes,
		// The slot travels with the request, for the handler to mark it
		// serving (no longer evictable).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peerConn); ok {
				return context.WithValue(ctx, slotKey{}, pc.st)
			}
			return ctx
		},
		// A flood's broken heads are not worth a line each on stderr.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	s.hs.SetKeepAlivesEnabled(false)
	go s.hs.Serve(s.pl) // returns when Shutdown closes the listener
	return s
}

// Addr returns the listener's address.
func (s *Server) Addr() net.Addr { return s.pl.Addr() }

// Shutdown closes the listener, then waits for the connections being served
// to finish, until ctx ends; then it closes them. It returns ctx.Err() if it
// had to cut connections, otherwise nil. It does not wait for a handler
// that is still running on a cut connection.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.hs.Shutdown(ctx)
	if err == nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	if ctx.Err() != nil {
		s.hs.Close()
		return ctx.Err()
	}
	return err
}

type slotKey struct{}

// ServeHTTP answers one request from the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if st, ok := r.Context().Value(slotKey{}).(*slot); ok && !s.pl.serving(st) {
		return // evicted while its head arrived; the connection is closed
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h, ok := s.routes[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	status, contentType, body := callHandler(h)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// callHandler runs h, turning a panic or an unusable result into a 500.
func callHandler(h Handler) (status int, contentType string, body []byte) {
	defer func() {
		if recover() != nil {
			status, contentType, body = 500, textPlain, []byte("500 internal server error\n")
		}
	}()
	var b bytes.Buffer
	status, contentType = h(&b)
	if status < 200 || status > 999 { // 1xx are interim, not final answers
		return 500, textPlain, []byte("500 internal server error\n")
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return status, contentType, b.Bytes()
}

const textPlain = "text/plain; charset=utf-8"
