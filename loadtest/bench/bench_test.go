package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs the whole harness briefly: every server it can run,
// a small name set, about two seconds per phase. It checks that each
// server gets a row with answers, not how fast it is.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("smoke bench takes about 30s; skipped with -short")
	}
	for prog, pkg := range map[string]string{"dnsperf": "dnsperf", "unbound": "unbound", "dnsmasq": "dnsmasq-base", "taskset": "util-linux"} {
		if _, err := lookPath(prog); err != nil {
			t.Skipf("%s not installed (Debian package %s): %v", prog, pkg, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Duration = 2 * time.Second
	cfg.Names = 200
	cfg.RSSNames = 300
	cfg.Rate = 2000
	cfg.OutDir = t.TempDir()
	cfg.Servers = []string{Unbound, Dnsmasq}

	// The frontend and the CoreDNS build come from this module. A package
	// without its main yet leaves its server out; one that fails to build
	// fails the test.
	bin := t.TempDir()
	if main, ok := buildMain(t, "./frontend", filepath.Join(bin, "nodedns-frontend")); ok {
		cfg.FrontendBin = main
		cfg.Servers = append([]string{Frontend}, cfg.Servers...)
	}
	if main, ok := buildMain(t, "./backend", filepath.Join(bin, "nodedns-backend")); ok {
		cfg.CoreDNSBin = main
		cfg.Servers = append(cfg.Servers, NodeLocal)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
	if len(rep.Rows) != len(cfg.Servers) {
		t.Fatalf("%d rows for %d servers", len(rep.Rows), len(cfg.Servers))
	}
	for _, row := range rep.Rows {
		if row.Dnsperf.QPS <= 0 || row.Latency.Received == 0 || row.PeakRSS == 0 {
			t.Errorf("%s: qps %.0f, %d latency samples, peak RSS %d", row.Server, row.Dnsperf.QPS, row.Latency.Received, row.PeakRSS)
		}
		if !hasRow(table.String(), row.Server) {
			t.Errorf("table has no row for %s", row.Server)
		}
	}
}

func hasRow(table, server string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == server {
			return true
		}
	}
	return false
}

// buildMain builds the main package in dir (relative to the module root)
// to out. It reports false, logging why, when dir holds no main package
// yet.
func buildMain(t *testing.T, dir, out string) (string, bool) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	list := exec.Command("go", "list", "-f", "{{.Name}}", dir)
	list.Dir = root
	name, err := list.Output()
	if err != nil || strings.TrimSpace(string(name)) != "main" {
		t.Logf("leaving out %s: no main package there yet (%v)", dir, err)
		return "", false
	}
	build := exec.Command("go", "build", "-o", out, dir)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
	return out, true
}
