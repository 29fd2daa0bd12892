package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// startFrontend runs nodedns-frontend on loopback, without touching the
// node's network, in front of the backend b, and returns its DNS address
// once its /ready answers. The binary is $NODEDNS_FRONTEND_BIN, else built
// from this tree into a temporary directory (a possibly stale bin/ is not
// used; the frontend links neither CoreDNS nor client-go: seconds).
func startFrontend(t testing.TB, b *backend, extraArgs ...string) string {
	t.Helper()
	bin := os.Getenv("NODEDNS_FRONTEND_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "nodedns-frontend")
		out, err := exec.Command("go", "build", "-o", bin, "../frontend").CombinedOutput()
		if err != nil {
			t.Fatalf("build nodedns-frontend: %v\n%s", err, out)
		}
	}
	dnsAddr, metrics, health := dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	cmd := exec.CommandContext(context.Background(), bin, append([]string{
		"--listen=" + dnsAddr,
		"--backend=" + b.DNS,
		"--setup-network=false",
		"--metrics=" + metrics,
		"--health=" + health,
		"--backend-ready-url=http://" + b.Ready + "/ready",
	}, extraArgs...)...)
	fe := proctest.Start(t, "nodedns-frontend", cmd)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-fe.Done():
			t.Fatalf("nodedns-frontend exited: %v\n%s", fe.Err(), fe.Output.String())
		default:
		}
		if code, _, err := httpGet("http://" + health + "/ready"); err == nil && code == 200 {
			return dnsAddr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodedns-frontend not ready after 20s\n%s", fe.Output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
