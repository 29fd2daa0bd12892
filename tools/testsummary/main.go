// Command testsummary runs `go test -json`, shows what a person needs while
// it runs, records the events, and ends the whole suite with one summary:
// tests run, passed, failed, skipped, and each distinct skip reason with
// its count, so that a passing run cannot hide a tier that never ran.
// `make test` uses it.
//
// Usage:
//
//	testsummary run FILE -- go test -json [flags] [packages]
//	testsummary report [-strict-skips] [-expected-skips REGEXP] FILE...
//
// run starts the command, copies its stdout (test2json events) to FILE,
// and prints package results, build errors and the output of each failing
// test as it fails; it exits with the command's status. report reads the
// recorded FILEs and prints the summary; it exits 1 when a test or package
// failed, or, with -strict-skips, when a test skipped for a reason not in
// the allowlist (allow.go) and not matched by -expected-skips. -strict-skips
// defaults to true when NODEDNS_STRICT_SKIPS=1, as .ci/run sets it;
// -expected-skips to NODEDNS_EXPECTED_SKIPS, which a CI runner that lacks
// something the suite needs sets to the reasons it makes tests give (the
// summary lists those skips as expected there).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
)

const usage = `usage: testsummary run FILE -- COMMAND [ARG...]
       testsummary report [-strict-skips] [-expected-skips REGEXP] FILE...`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run carries out one invocation and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		if len(args) < 4 || args[2] != "--" {
			fmt.Fprintln(stderr, usage)
			return 2
		}
		code, err := runCommand(args[1], args[3:], stdout, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		return code
	case "report":
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		fs.SetOutput(stderr)
		strict := fs.Bool("strict-skips", os.Getenv("NODEDNS_STRICT_SKIPS") == "1",
			"fail when a test skips for a reason not in the allowlist (default true when NODEDNS_STRICT_SKIPS=1)")
		expected := fs.String("expected-skips", os.Getenv("NODEDNS_EXPECTED_SKIPS"),
			"a regular expression of skip reasons this machine cannot meet: listed as expected, never errors (default $NODEDNS_EXPECTED_SKIPS)")
		if err := fs.Parse(args[1:]); err != nil {
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
			fmt.Fprintln(stderr, usage)
			return 2
		}
		r, err := readFiles(fs.Args())
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
			return 1
		}
		if !Report(stdout, r, policy) {
			return 1
		}
		return 0
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
}

// readFiles reads recorded runs into one Results, quietly.
func readFiles(paths []string) (*Results, error) {
	r := NewResults(nil)
	var errs []error
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("open recorded run: %w", err))
			continue
		}
		if err := r.Read(f, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		f.Close()
		r.Close()
	}
	return r, errors.Join(errs...)
}
