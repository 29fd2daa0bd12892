package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHeavyDeps keeps the per-node binary lean: it must not link the
// Kubernetes client or CoreDNS (the backend's business), nor the Prometheus
// client with its protobuf machinery (about 2.4 MB of code, nearly all of it
// resident on every node; shared/metrics serves the same text format).
func TestNoHeavyDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not in PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "github.com/coredns/coredns", "github.com/prometheus/client_golang", "google.golang.org/protobuf"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("nodedns-frontend depends on %s", pkg)
			}
		}
	}
}
