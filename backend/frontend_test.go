package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startFrontend runs nodedns-frontend on loopback, without touching the
// node's network, in front of the backend b, and returns its DNS address
// once its /ready answers. The binary is $NODEDNS_FRONTEND_BIN, else built
// from this tree into a temporary directory (a possibly stale bin/ is not
// used; the frontend links neither CoreDNS nor client-go: seconds).
func startFrontend(t testing.TB, b *backend) string {
	t.Helper()
	bin := os.Getenv("NODEDNS_FRONTEND_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "nodedns-frontend")
		out, err := exec.Command("go", "build", "-o", bin, "../frontend").CombinedOutput()
		if err != nil {
			t.Fatalf("build nodedns-frontend: %v\n%s", err, out)
		}
	}
	dnsAddr, metrics, health := freeAddr(t), freeAddr(t), freeAddr(t)
	cmd := exec.CommandContext(context.Background(), bin,
		"--listen="+dnsAddr,
		"--backend="+b.DNS,
		"--setup-network=false",
		"--metrics="+metrics,
		"--health="+health,
		"--backend-ready-url=http://"+b.Ready+"/ready",
	)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nodedns-frontend: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("nodedns-frontend output:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("nodedns-frontend exited: %v\n%s", err, log.String())
		default:
		}
		if code, _, err := httpGet("http://" + health + "/ready"); err == nil && code == 200 {
			return dnsAddr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodedns-frontend not ready after 20s\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
