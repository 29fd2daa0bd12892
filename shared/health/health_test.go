package health

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nodedns/nodedns/shared/httpserve"
)

func TestRoutes(t *testing.T) {
	var mu sync.Mutex
	ready, detail := false, "backend down"
	set := func(r bool, d string) { mu.Lock(); ready, detail = r, d; mu.Unlock() }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserve.Serve(l, Routes(func() (bool, string) { mu.Lock(); defer mu.Unlock(); return ready, detail }))
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}

	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health = %d, want 200", code)
	}
	if code, body := get("/ready"); code != 503 || body != "backend down" {
		t.Errorf("/ready not ready = %d %q, want 503 %q", code, body, "backend down")
	}
	set(true, "")
	if code, body := get("/ready"); code != 200 || body != "OK" {
		t.Errorf("/ready ready = %d %q, want 200 OK", code, body)
	}
	set(false, "")
	if code, body := get("/ready"); code != 503 || body != "not ready" {
		t.Errorf("/ready not ready without detail = %d %q, want 503 %q", code, body, "not ready")
	}
}
