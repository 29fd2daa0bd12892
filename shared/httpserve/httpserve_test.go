package httpserve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

func okHandler(text string) Handler {
	return func(body *bytes.Buffer) (int, string) {
		body.WriteString(text)
		return 200, "text/plain; version=0.0.4; charset=utf-8"
	}
}

// start serves routes on 127.0.0.1:0 and shuts the server down at the end
// of the test.
func start(t *testing.T, routes map[string]Handler) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(l, routes)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// raw sends req on a fresh connection and returns all bytes until the
// server closes it.
func raw(t *testing.T, s *Server, req string) string {
	t.Helper()
	got, err := tryRaw(s, req)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// tryRaw sends req on a new connection and reads until the server closes.
func tryRaw(s *Server, req string) (string, error) {
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), fmt.Errorf("read: %w (got %q)", err, b)
	}
	return string(b), nil
}

func TestGetWithHTTPClient(t *testing.T) {
	s := start(t, map[string]Handler{"/metrics": okHandler("up 1\n")})
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != "up 1\n" {
		t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "up 1\n")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if resp.ContentLength != 5 || !resp.Close {
		t.Errorf("ContentLength %d Close %v, want 5 true", resp.ContentLength, resp.Close)
	}
}

func TestHead(t *testing.T) {
	s := start(t, map[string]Handler{"/metrics": okHandler("up 1\n")})
	got := raw(t, s, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	want := "HTTP/1.1 200 OK\r\n" +
		"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n" +
		"Content-Length: 5\r\n" +
		"Connection: close\r\n\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRequests(t *testing.T) {
	s := start(t, map[string]Handler{
		"/health": okHandler("OK\n"),
		"/ready": func(body *bytes.Buffer) (int, string) {
			body.WriteString("backend down\n")
			return 503, "text/plain"
		},
	})
	tests := []struct {
		name   string
		req    string
		status int
		body   string
		header string // "Name: value" that must be present
	}{
		{"get", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 200, "OK\n", ""},
		{"503", "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n", 503, "backend down\n", ""},
		{"query ignored", "GET /health?verbose=1&x=%20 HTTP/1.1\r\nHost: x\r\n\r\n", 200, "OK\n", ""},
		{"http/1.0", "GET /health HTTP/1.0\r\n\r\n", 200, "OK\n", ""},
		{"absolute form", "GET http://node:9254/health?x HTTP/1.1\r\nHost: node\r\n\r\n", 200, "OK\n", ""},
		{"not found", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "404 page not found\n", "Content-Type: text/plain; charset=utf-8"},
		{"prefix is not a match", "GET /health/x HTTP/1.1\r\n\r\n", 404, "404 page not found\n", ""},
		{"post", "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405, "405 method not allowed\n", "Allow: GET, HEAD"},
		{"lowercase get", "get /health HTTP/1.1\r\n\r\n", 405, "405 method not allowed\n", "Allow: GET, HEAD"},
		{"one field", "GET\r\n\r\n", 400, "400 bad request\n", ""},
		{"two fields", "GET /health\r\n\r\n", 400, "400 bad request\n", ""},
		{"four fields", "GET /health HTTP/1.1 x\r\n\r\n", 400, "400 bad request\n", ""},
		{"double space", "GET  /health HTTP/1.1\r\n\r\n", 400, "400 bad request\n", ""},
		{"bad proto", "GET /health HTTP/2.0\r\n\r\n", 400, "400 bad request\n", ""},
		{"not http", "GET /health FOO\r\n\r\n", 400, "400 bad request\n", ""},
		{"relative target", "GET health HTTP/1.1\r\n\r\n", 400, "400 bad request\n", ""},
		{"method not a token", "G(T /health HTTP/1.1\r\n\r\n", 400, "400 bad request\n", ""},
		{"bad header", "GET /health HTTP/1.1\r\nno colon here\r\n\r\n", 400, "400 bad request\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := raw(t, s, tt.req)
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
			if err != nil {
				t.Fatalf("parse %q: %v", got, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || string(body) != tt.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
			head, _, _ := strings.Cut(got, "\r\n\r\n")
			for _, h := range []string{"\r\nConnection: close", "\r\nContent-Length: ", "\r\nContent-Type: "} {
				if !strings.Contains(head, h) {
					t.Errorf("no %q in %q", h, head)
				}
			}
			if tt.header != "" && !strings.Contains(got, "\r\n"+tt.header+"\r\n") {
				t.Errorf("no %q in %q", tt.header, got)
			}
		})
	}
}

func TestOversizedHead(t *testing.T) {
	s := start(t, map[string]Handler{"/health": okHandler("OK\n")})
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET /health HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n"
	go io.WriteString(c, req) // may fail once the server closes; the answer is what counts
	got, _ := io.ReadAll(c)   // a reset is an acceptable end too
	if strings.HasPrefix(string(got), "HTTP/1.1 200") {
		t.Fatalf("oversized head answered 200")
	}
	if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 431 Request Header Fields Too Large\r\n") {
		t.Errorf("got %q, want a 431 or nothing", got)
	}
}

func TestSilentClientClosedAfterTimeout(t *testing.T) {
	old := headTimeout
	headTimeout = 100 * time.Millisecond
	t.Cleanup(func() { headTimeout = old })
	s := start(t, map[string]Handler{"/health": okHandler("OK\n")})

	for _, tt := range []struct{ name, send, want string }{
		{"nothing sent", "", ""},
		{"partial head", "GET /health HTTP/1.1\r\nHost:", "HTTP/1.1 408 Request Timeout\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tt.send)
			begin := time.Now()
			c.SetReadDeadline(begin.Add(3 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("read: %v (want the server to close)", err)
			}
			if !strings.HasPrefix(string(got), tt.want) || (tt.want == "" && len(got) > 0) {
				t.Errorf("got %q, want prefix %q", got, tt.want)
			}
			if d := time.Since(begin); d < 50*time.Millisecond {
				t.Errorf("closed after %v, before the deadline", d)
			}
		})
	}
}

// TestAllSlotsServing: when every slot a peer may hold is serving a
// request, nothing is evictable and its next connection is closed at once.
func TestAllSlotsServing(t *testing.T) {
	release := make(chan struct{})
	s := start(t, map[string]Handler{"/slow": func(body *bytes.Buffer) (int, string) {
		<-release
		return 200, "text/plain"
	}})
	t.Cleanup(func() { close(release) })
	for range maxConnsPerPeer {
		c := dialFrom(t, s, "127.0.0.2")
		io.WriteString(c, "GET /slow HTTP/1.1\r\n\r\n")
	}
	time.Sleep(200 * time.Millisecond) // every handler is running by now
	c := dialPending(t, s, "127.0.0.2")
	if !closedSoon(c, 2*time.Second) {
		t.Fatalf("a connection over the limit with every slot serving stayed open")
	}
	// Another peer still gets in.
	d := dialPending(t, s, "127.0.0.3")
	if closedSoon(d, 200*time.Millisecond) {
		t.Errorf("another peer's connection was closed")
	}
}

func TestHandlerPanic(t *testing.T) {
	s := start(t, map[string]Handler{
		"/panic": func(*bytes.Buffer) (int, string) { panic("boom") },
		"/bad":   func(*bytes.Buffer) (int, string) { return 0, "" },
		"/ok":    okHandler("OK\n"),
	})
	for _, path := range []string{"/panic", "/bad"} {
		got := raw(t, s, "GET "+path+" HTTP/1.1\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 500 Internal Server Error\r\n") {
			t.Errorf("%s: got %q, want 500", path, got)
		}
	}
	if got := raw(t, s, "GET /ok HTTP/1.1\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Errorf("after a panic: got %q, want 200", got)
	}
}

// slowServer serves /slow, which signals started and then waits for release.
func slowServer(t *testing.T) (s *Server, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	s = start(t, map[string]Handler{"/slow": func(body *bytes.Buffer) (int, string) {
		close(started)
		<-release
		body.WriteString("done\n")
		return 200, "text/plain"
	}})
	return s, started, release
}

func TestShutdownWaitsForInflight(t *testing.T) {
	s, started, release := slowServer(t)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/slow")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a handler ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v, want nil", err)
	}
	if got := <-answer; got != "200 OK done\n" {
		t.Errorf("in-flight request got %q", got)
	}
	if c, err := net.Dial("tcp", s.Addr().String()); err == nil {
		c.Close()
		t.Errorf("listener still accepts after Shutdown")
	}
}

func TestShutdownCutsOnExpiredContext(t *testing.T) {
	s, started, release := slowServer(t)
	t.Cleanup(func() { close(release) })
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /slow HTTP/1.1\r\n\r\n")
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v, want %v", err, context.Canceled)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := io.ReadAll(c); len(got) != 0 || isTimeout(err) {
		t.Errorf("cut connection: read %q, %v; want it closed without an answer", got, err)
	}
	if c, err := net.Dial("tcp", s.Addr().String()); err == nil {
		c.Close()
		t.Errorf("listener still accepts after Shutdown")
	}
}

func TestShutdownIdle(t *testing.T) {
	s := start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Nothing to cut: no error even with an expired context.
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestRequestPath(t *testing.T) {
	for _, tt := range []struct {
		target, path string
		ok           bool
	}{
		{"/", "/", true},
		{"/metrics", "/metrics", true},
		{"/metrics?a=b?c", "/metrics", true},
		{"http://h/metrics", "/metrics", true},
		{"HTTP://h:1/metrics?x", "/metrics", true},
		{"https://h/ready", "/ready", true},
		{"http://h", "/", true},
		{"http://h?x", "/", true},
		{"*", "", false},
		{"h:80", "", false},
		{"ftp://h/x", "", false},
	} {
		path, ok := requestPath(tt.target)
		if path != tt.path || ok != tt.ok {
			t.Errorf("requestPath(%q) = %q, %v; want %q, %v", tt.target, path, ok, tt.path, tt.ok)
		}
	}
}

// FuzzReadAndRoute feeds arbitrary request heads to the parser: it must
// not panic, and it answers 200 only for a GET or HEAD of a known path.
func FuzzReadAndRoute(f *testing.F) {
	for _, seed := range []string{
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /health?x HTTP/1.0\r\n\r\n",
		"GET http://h/health HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\n\r\n",
		"GET /health HTTP/1.1\r\n continuation\r\n\r\n",
		"GET\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	s := &Server{routes: map[string]Handler{"/health": okHandler("OK\n")}}
	f.Fuzz(func(t *testing.T, head []byte) {
		lr := &io.LimitedReader{R: bytes.NewReader(head), N: maxHeadBytes}
		resp, ok := s.readAndRoute(textproto.NewReader(bufio.NewReader(lr)), lr)
		if ok && resp.status == 200 {
			line, _, _ := bytes.Cut(head, []byte("\n"))
			if !bytes.HasPrefix(line, []byte("GET ")) && !bytes.HasPrefix(line, []byte("HEAD ")) {
				t.Errorf("200 for %q", head)
			}
		}
	})
}
