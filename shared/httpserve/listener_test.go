package httpserve

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestIdleConnectionsDeferred: a connection that has sent nothing holds no
// slot (the kernel keeps it until its first bytes, deferAccept), and is
// answered as soon as its head comes.
func TestIdleConnectionsDeferred(t *testing.T) {
	s := start(t, map[string]Handler{"/health": okHandler("OK\n")})
	if s.deferErr != nil {
		t.Fatalf("accepts not deferred: %v", s.deferErr)
	}
	for range 3 {
		dialFrom(t, s, "127.0.0.2") // closed at the end of the test
	}
	time.Sleep(300 * time.Millisecond)
	s.mu.Lock()
	held := len(s.conns)
	s.mu.Unlock()
	if held != 0 {
		t.Errorf("%d idle connections hold a slot 300ms after their connect, want 0", held)
	}
	c := dialFrom(t, s, "127.0.0.2")
	begin := time.Now()
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET on a deferred connection: %v", err)
	}
	resp.Body.Close()
	if d := time.Since(begin); resp.StatusCode != 200 || d > 500*time.Millisecond {
		t.Errorf("GET on a deferred connection: %d after %v, want 200 at once", resp.StatusCode, d)
	}
}
