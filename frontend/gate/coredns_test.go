package gate

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/dnstest"
	"golang.org/x/sys/unix"
)

// TestCoreDNS gates on the real backend (CoreDNS with its ready plugin):
// the binary named by NODEDNS_BACKEND, else bin/nodedns-backend.
func TestCoreDNS(t *testing.T) {
	bin := os.Getenv("NODEDNS_BACKEND")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "nodedns-backend")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no backend binary (%v): run `make build` or set NODEDNS_BACKEND", err)
	}
	dnsAddr, readyAddr := dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(dnsAddr)
	conf := filepath.Join(t.TempDir(), "Corefile")
	corefile := fmt.Sprintf(".:%s {\n    bind 127.0.0.1\n    ready %s\n    template IN SOA in-addr.arpa {\n        rcode NOERROR\n    }\n}\n", port, readyAddr)
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}

	g, _, changes := run(t, Config{Backend: dnsAddr, ReadyURL: "http://" + readyAddr + "/ready"})
	if c := next(t, changes); c.ready || !strings.Contains(c.detail, "connection refused") {
		t.Fatalf("before start: %+v", c)
	}
	cmd := exec.Command(bin, "-conf", conf, "-quiet")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, detail := g.Ready(); !ok || !strings.Contains(detail, "NOERROR") {
		t.Errorf("Ready() = %v, %q", ok, detail)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for {
		c := next(t, changes)
		if !c.ready {
			break
		}
	}
}

// refusedAddr returns a loopback address that refuses connections for the
// whole test: a TCP socket bound to it without listening, so that the port
// cannot be taken by a server of another test running meanwhile (as a
// port freed by freeAddr can).
func refusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
}
