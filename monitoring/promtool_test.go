package monitoring

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// checkMetrics runs `promtool check metrics` on a /metrics body: it parses
// the text format and lints names, types, units and help (counters end in
// _total, every family has HELP, ...). It returns the lint findings, one
// per line ("name problem"), or an error when the body does not parse or
// promtool fails otherwise.
func checkMetrics(body string) ([]string, error) {
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &exit) && exit.ExitCode() == lintExitCode:
		var findings []string
		for _, line := range strings.Split(out.String(), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				findings = append(findings, line)
			}
		}
		return findings, nil
	}
	return nil, fmt.Errorf("promtool check metrics: %v:\n%s", err, bytes.TrimSpace(out.Bytes()))
}

// lintExitCode is promtool's exit status for lint problems only (1 is an
// error, such as text that does not parse).
const lintExitCode = 3
