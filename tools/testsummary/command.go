package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
)

// runCommand runs args (a `go test -json` command), records its stdout in
// path and echoes to stdout what Results.live shows. Its stderr passes
// through. It returns the command's exit status: 1 when a signal ended it.
func runCommand(path string, args []string, stdout, stderr io.Writer) (int, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 1, fmt.Errorf("create directory for %s: %w", path, err)
	}
	rec, err := os.Create(path)
	if err != nil {
		return 1, fmt.Errorf("create recording: %w", err)
	}
	defer rec.Close()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 1, fmt.Errorf("%s: %w", args[0], err)
	}
	// Ctrl-C reaches the whole process group: let the command end its
	// run and keep reading, so the recording has its last events.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)

	fmt.Fprintf(stdout, "== %s\n   (events recorded in %s)\n", commandLine(args), path)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start %s: %w", args[0], err)
	}
	r := NewResults(stdout)
	readErr := r.Read(out, rec)
	if readErr != nil {
		io.Copy(io.Discard, out) // let the command finish writing
	}
	waitErr := cmd.Wait()
	r.Close()
	fmt.Fprintf(stdout, "== %d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		if code = exit.ExitCode(); code < 0 {
			code = 1
		}
	case waitErr != nil:
		return 1, fmt.Errorf("%s: %w", args[0], waitErr)
	}
	if code == 0 && !r.OK() {
		code = 1 // a failure the command did not report in its status
	}
	return code, errors.Join(readErr, rec.Close())
}

// maxCommandLine bounds the command line echoed at the start of a run:
// the suite's second part names every package.
const maxCommandLine = 160

// commandLine returns args joined, the tail elided past maxCommandLine.
func commandLine(args []string) string {
	line := ""
	for i, a := range args {
		if i > 0 && len(line)+1+len(a) > maxCommandLine {
			return fmt.Sprintf("%s ... (%d more arguments)", line, len(args)-i)
		}
		if i > 0 {
			line += " "
		}
		line += a
	}
	return line
}
