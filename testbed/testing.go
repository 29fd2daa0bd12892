package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Unavailable returns why testbed tests do not run here (not root, or etcd
// missing), or "" when they do. Start itself needs no root; tests ask for it
// like every kernel and testbed tier, and so that the Kubernetes binaries
// come from root's cache, where `make tools` put them. Missing binaries are
// not a reason: Start builds them.
func Unavailable() string {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Sprintf("not root (euid %d): testbed tests run as root, like the kernel tier", euid)
	}
	if _, err := EtcdPath(); err != nil {
		return err.Error()
	}
	return ""
}

// UnavailableNodes returns why AddNode and kube-proxy cannot run here (see
// Unavailable, or a tool missing), or "" when they can.
func UnavailableNodes() string {
	if r := Unavailable(); r != "" {
		return r
	}
	for _, tool := range []string{"ip", "iptables", "iptables-save", "iptables-restore", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found: install iproute2, iptables and nftables"
		}
	}
	return ""
}

// StartForTest starts a testbed for t, skipping t when Unavailable says so.
// It stops the testbed in t.Cleanup and, when t failed, logs the end of each
// process log first. Progress goes to t.Logf.
func StartForTest(t testing.TB, opts Options) *Testbed {
	t.Helper()
	if r := Unavailable(); r != "" {
		t.Skip("testbed: " + r)
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	tb, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start testbed: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testbed logs (dir %s):\n%s", tb.Dir, tb.LogTails())
		}
		if err := tb.Stop(); err != nil {
			t.Errorf("stop testbed: %v", err)
		}
	})
	return tb
}
