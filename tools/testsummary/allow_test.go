package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSkipAllowed checks the allowlist against the reasons the tree's tests
// give today: those root and the Debian packages of tools/deps.sh cure
// must stay errors in strict mode.
func TestSkipAllowed(t *testing.T) {
	tests := []struct {
		reason  string
		allowed bool
	}{
		{"no IPVS in this kernel", true},
		{"IPVS is not available: modprobe ip_vs: exit status 1", true},
		{`no "dummy" link type in this kernel`, true},
		{"set NODEDNS_MEASURE_SECONDS to measure", true},
		{"memory study: pass -memstudy", true},
		// Reasons root, the packages and `make build` cure.
		{"kernel test: needs root to create network namespaces (run as root: sudo go test)", false},
		{`kernel test: "conntrack" not on PATH (Debian packages iproute2, iptables, conntrack): exec: not found`, false},
		{"testbed: not root (euid 1000): testbed tests run as root, like the kernel tier", false},
		{"testbed: etcd not found at /usr/bin/etcd or in PATH: install it with `apt-get install etcd-server` (or set NODEDNS_ETCD)", false},
		{"dnsperf not installed (Debian package dnsperf): exec: not found", false},
		{"no backend binary (stat ../../bin/nodedns-backend: no such file): run `make build` or set NODEDNS_BACKEND", false},
		{"no IPv6 loopback on this machine: listen udp [::1]:0: cannot assign", false},
		// -short is never given to the suite.
		{"-short: the smoke starts a testbed", false},
		{"testbed test; -short given", false},
		{"set NODEDNS_MEASURE_SECONDS to measure, or else", false},
		{noReason, false},
	}
	for _, tt := range tests {
		if got := skipAllowed(tt.reason) != ""; got != tt.allowed {
			t.Errorf("skipAllowed(%q) = %v, want %v", tt.reason, got, tt.allowed)
		}
	}
}

// TestAllowedSkipsExist checks that each allowlist entry written for one
// test's exact message (anchored ^...$) still matches a t.Skip in the
// tree, so that a reworded skip does not leave a dead entry behind.
func TestAllowedSkipsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	skipCall := regexp.MustCompile(`\bt\.Skip\("((?:[^"\\]|\\.)*)"\)`)
	var reasons []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range skipCall.FindAllSubmatch(b, -1) {
			reasons = append(reasons, string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) == 0 {
		t.Fatal("found no t.Skip in the tree: is the walk rooted right?")
	}
	for _, a := range allowedSkips {
		src := a.pattern.String()
		if !strings.HasPrefix(src, "^") || !strings.HasSuffix(src, "$") {
			continue // a pattern for a kind of reason, not one test's message
		}
		found := false
		for _, r := range reasons {
			found = found || a.pattern.MatchString(r)
		}
		if !found {
			t.Errorf("allowlist entry %s matches no t.Skip(\"...\") in the tree: remove or update it", src)
		}
	}
}
