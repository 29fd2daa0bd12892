package health

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	ready, detail := false, "backend down"
	srv := httptest.NewServer(Handler(func() (bool, string) { return ready, detail }))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
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
		t.Errorf("/ready not ready = %d %q, want 503 %q", code, body, detail)
	}
	ready, detail = true, ""
	if code, body := get("/ready"); code != 200 || body != "OK" {
		t.Errorf("/ready ready = %d %q, want 200 OK", code, body)
	}
}
