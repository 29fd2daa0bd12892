package testbed

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEgressProxy speaks to the egress proxy as kube-apiserver's egress
// selector does (HTTPConnect over a Unix socket). Without a control-plane
// namespace only the host-namespace path runs: it needs no root.
func TestEgressProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	p, err := newEgressProxy(filepath.Join(t.TempDir(), egressSocketFile), func() string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	for _, tc := range []struct {
		name, request string
		status        int
		body          string // in the reply body; for 200, echoed through the tunnel
	}{
		{"host address, dialled from this namespace", "CONNECT " + echo.Addr().String() + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200, "ping"},
		{"refused", "CONNECT " + closedAddr + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 502, "connection refused"},
		{"pod address before any node network", "CONNECT 10.244.1.5:80 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 502, "no node network exists yet"},
		{"kubelet address before any node network", "CONNECT 172.31.254.10:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 502, "no node network exists yet"},
		{"ClusterIP before any node network", "CONNECT 10.96.0.10:53 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 502, "no node network exists yet"},
		{"not a CONNECT", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405, ""},
		{"target without port", "CONNECT 10.244.1.5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 502, "bad CONNECT target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", p.path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status != 200 {
				b, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(b), tc.body) {
					t.Errorf("body %q, want it to contain %q", b, tc.body)
				}
				return
			}
			if n := br.Buffered(); n != 0 {
				t.Fatalf("%d bytes after the 200 before the client spoke", n)
			}
			if _, err := io.WriteString(c, tc.body); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(tc.body))
			if _, err := io.ReadFull(br, got); err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.body {
				t.Errorf("through the tunnel: %q, want %q", got, tc.body)
			}
		})
	}
}

// TestEgressSocketPath: a testbed directory too long for a Unix socket
// path puts the socket in a short directory of its own, which Stop
// removes; the configuration names whichever path is used.
func TestEgressSocketPath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string
		ownDir bool
	}{
		{"short", t.TempDir(), false},
		{"too long", filepath.Join(t.TempDir(), strings.Repeat("d", 120)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(tc.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tb := &Testbed{Dir: tc.dir}
			if err := tb.startEgress(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := tb.egress.close(); err != nil {
					t.Error(err)
				}
				if tb.egressDir != "" {
					_ = os.RemoveAll(tb.egressDir)
				}
			}()
			if got := tb.egressDir != ""; got != tc.ownDir {
				t.Errorf("own socket directory %v, want %v", got, tc.ownDir)
			}
			if len(tb.egress.path) > maxUnixPath {
				t.Errorf("socket path %d bytes long", len(tb.egress.path))
			}
			cfg, err := os.ReadFile(filepath.Join(tc.dir, egressConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cfg), fmt.Sprintf("udsName: %q", tb.egress.path)) {
				t.Errorf("configuration does not name %s:\n%s", tb.egress.path, cfg)
			}
			c, err := net.Dial("unix", tb.egress.path)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		})
	}
}
