package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// TestConformance runs Kubernetes' `[sig-network] DNS` conformance specs
// (and, with NODEDNS_CONFORMANCE_OTHERS=1, the other specs of dns.go that
// need no internet) on two real kubelet nodes, once for each design of
// NODEDNS_CONFORMANCE_DESIGNS (comma-separated; default "iptables", the
// pass `make test` runs; `make conformance` runs all four), and fails when
// a conformance spec fails on a nodedns design. It prints one table per
// spec set and the summary line; the JUnit reports go to
// NODEDNS_CONFORMANCE_OUT/<design>/ (default a temporary directory).
func TestConformance(t *testing.T) {
	designs := strings.Split(envOr("NODEDNS_CONFORMANCE_DESIGNS", DesignIPTables), ",")
	for _, d := range designs {
		if !contains(Designs, d) {
			t.Fatalf("NODEDNS_CONFORMANCE_DESIGNS: %q is not one of %s", d, strings.Join(Designs, ", "))
		}
	}
	if r := testbed.RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	others := os.Getenv("NODEDNS_CONFORMANCE_OTHERS") == "1"
	out := os.Getenv("NODEDNS_CONFORMANCE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()

	start := time.Now()
	if err := testbed.RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	e2eBin, agnhostBin := buildTools(t)
	kubectl, err := testbed.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archives, frontend, backend := buildImages(ctx, t, dir, agnhostBin)
	t.Logf("conformance: binaries and images ready in %s", time.Since(start).Round(time.Second))

	start = time.Now()
	tb, nodes := testbed.StartRealNodesForTest(t, []string{"node-a", "node-b"}, archives)
	if err := testbed.DeployCoreDNS(ctx, tb.Client(), backend.Ref, 2); err != nil {
		t.Fatal(err)
	}
	cl := &Cluster{TB: tb, Nodes: nodes, Frontend: frontend, Logf: t.Logf}
	t.Logf("conformance: control plane, two nodes and CoreDNS up in %s", time.Since(start).Round(time.Second))

	specs := ConformanceSpecs
	focus := ConformanceFocus
	if others {
		specs = append(append([]string{}, ConformanceSpecs...), OtherSpecs...)
		focus = ConformanceFocus + "|" + Focus(OtherSpecs)
	}
	results := map[string]map[string]Result{}
	for _, d := range designs {
		start := time.Now()
		undo, err := cl.Setup(ctx, d)
		if err != nil {
			t.Errorf("%s: set up: %v", d, err)
			if undo != nil {
				_ = undo(ctx)
			}
			continue
		}
		e := E2E{Binary: e2eBin, Kubectl: kubectl, Kubeconfig: tb.Kubeconfig, ReportDir: filepath.Join(out, d)}
		report, err := e.Run(ctx, focus)
		if err != nil {
			t.Errorf("%s: %v", d, err)
		} else if results[d], err = ParseJUnit(report, specs); err != nil {
			t.Errorf("%s: %v", d, err)
		}
		if err := undo(ctx); err != nil {
			t.Errorf("%s: undo: %v", d, err)
		}
		t.Logf("conformance: %s done in %s (report %s)", d, time.Since(start).Round(time.Second), e.ReportDir)
	}

	table, passed, failed, total := Table(designs, ConformanceSpecs, results)
	summary := fmt.Sprintf("Conformance specs (%s):\n\n%s", ConformanceFocus, table)
	if others {
		t2, p2, f2, n2 := Table(designs, OtherSpecs, results)
		summary += fmt.Sprintf("\nOther DNS specs of dns.go (no internet, no GCE): %d passed, %d failed of %d\n\n%s", p2, f2, n2, t2)
	}
	if f := Failures(designs, specs, results); f != "" {
		summary += "\nFailures:\n" + f + "\n"
	}
	summary += fmt.Sprintf("\nconformance: %d passed, %d failed of %d (designs: %s)\n", passed, failed, total, strings.Join(designs, ", "))
	fmt.Print(summary)
	if err := os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary), 0o644); err != nil {
		t.Error(err)
	}
	for _, d := range designs {
		for _, s := range ConformanceSpecs {
			if r := results[d][s]; r.Status != "passed" {
				t.Errorf("%s: %q %s", d, s, r.Status)
			}
		}
	}
}

// buildTools builds (or finds cached) e2e.test and agnhost with
// tools/k8s/build.sh.
func buildTools(t *testing.T) (e2eBin, agnhostBin string) {
	t.Helper()
	root, err := images.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "tools", "k8s", "build.sh"), "e2e.test", "agnhost")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tools/k8s/build.sh e2e.test agnhost: %v\n%s", err, b)
	}
	t.Logf("conformance: e2e.test and agnhost ready in %s", time.Since(start).Round(time.Second))
	bin, err := testbed.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(bin, "e2e.test"), filepath.Join(bin, "agnhost")
}

// buildImages builds every image the nodes import: the testbed's pod
// images, nodedns's two (the backend also serves as kubeadm's CoreDNS) and
// the e2e test images, whose /coredns is the backend binary.
func buildImages(ctx context.Context, t *testing.T, dir, agnhostBin string) (all []testbed.Archive, frontend, backend testbed.Archive) {
	t.Helper()
	all, err := testbed.BuildPodImages(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if backend, err = testbed.BuildBackendImage(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if frontend, err = testbed.BuildFrontendImage(ctx, dir); err != nil {
		t.Fatal(err)
	}
	root, err := images.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	coredns := filepath.Join(dir, "coredns")
	if _, err := images.GoBuildIn(ctx, root, "./backend", coredns, "-s -w"); err != nil {
		t.Fatal(err)
	}
	test, err := BuildTestImages(ctx, dir, agnhostBin, coredns)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(all, backend, frontend), test...), frontend, backend
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
