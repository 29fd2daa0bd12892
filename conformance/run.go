package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// E2E is one e2e.test run against the cluster.
type E2E struct {
	Binary     string // e2e.test (tools/k8s/build.sh e2e.test)
	Kubectl    string // kubectl, for the specs that exec through it
	Kubeconfig string
	ReportDir  string // the JUnit report (junit_01.xml) and e2e.log go here
}

// Run runs the specs matching focus and returns the JUnit report's path.
// A failed spec makes e2e.test exit non-zero; that is not an error here
// (the report says which), a missing report is.
func (e E2E) Run(ctx context.Context, focus string) (string, error) {
	if err := os.MkdirAll(e.ReportDir, 0o755); err != nil {
		return "", fmt.Errorf("e2e.test: %w", err)
	}
	log, err := os.Create(filepath.Join(e.ReportDir, "e2e.log"))
	if err != nil {
		return "", fmt.Errorf("e2e.test: %w", err)
	}
	defer log.Close()
	args := []string{
		"--provider=local",
		"--kubeconfig=" + e.Kubeconfig,
		"--kubectl-path=" + e.Kubectl,
		"--report-dir=" + e.ReportDir,
		"--ginkgo.focus=" + focus,
		"--ginkgo.no-color",
		"--ginkgo.v",
		"--ginkgo.timeout=1h",
	}
	cmd := exec.CommandContext(ctx, e.Binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = e.ReportDir
	runErr := cmd.Run()
	report := filepath.Join(e.ReportDir, "junit_01.xml")
	if _, err := os.Stat(report); err != nil {
		return "", fmt.Errorf("e2e.test %s: no JUnit report (%v); see %s", strings.Join(args, " "), runErr, log.Name())
	}
	return report, nil
}
