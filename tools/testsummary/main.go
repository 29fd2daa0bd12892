// Command testsummary ends `make test` with what gotestsum
// (gotest.tools/gotestsum, which runs the suite, shows its progress and
// lists its failures) does not say: tests run, passed, failed and skipped,
// each distinct skip reason with its count, and, in strict mode, whether
// every skip is one this machine may give. A passing run cannot then hide
// a tier that never ran.
//
// Usage:
//
//	testsummary [-strict-skips] [-expected-skips REGEXP] FILE...
//
// FILE is `go test -json` output, as gotestsum's --jsonfile records it.
// testsummary exits 1 when a test or package failed, or, with
// -strict-skips, when a test skipped for a reason neither in the allowlist
// (allow.go) nor matched by -expected-skips; 2 on bad usage.
// -strict-skips defaults to true when NODEDNS_STRICT_SKIPS=1, as .ci/run
// sets it; -expected-skips to NODEDNS_EXPECTED_SKIPS, which a CI runner
// that lacks something the suite needs sets to the reasons it makes tests
// give (the summary lists those skips as expected there).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
)

const usage = `usage: testsummary [-strict-skips] [-expected-skips REGEXP] FILE...`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run carries out one invocation and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsummary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage); fs.PrintDefaults() }
	strict := fs.Bool("strict-skips", os.Getenv("NODEDNS_STRICT_SKIPS") == "1",
		"fail when a test skips for a reason not in the allowlist (default true when NODEDNS_STRICT_SKIPS=1)")
	expected := fs.String("expected-skips", os.Getenv("NODEDNS_EXPECTED_SKIPS"),
		"a regular expression of skip reasons this machine cannot meet: listed as expected, never errors (default $NODEDNS_EXPECTED_SKIPS)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	policy := SkipPolicy{Strict: *strict}
	if *expected != "" {
		re, err := regexp.Compile(*expected)
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: -expected-skips: %v\n", err)
			return 2
		}
		policy.Expected = re
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	t, err := readFiles(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		return 1
	}
	if !Report(stdout, t, policy) {
		return 1
	}
	return 0
}

// readFiles reads recorded runs into one Tally.
func readFiles(paths []string) (*Tally, error) {
	t := NewTally()
	var errs []error
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("open recorded run: %w", err))
			continue
		}
		if err := t.Read(f); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		f.Close()
	}
	t.Close()
	return t, errors.Join(errs...)
}
