package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// examplesPerReason bounds the tests named under each skip reason.
const examplesPerReason = 3

// SkipPolicy says which skips fail a report.
type SkipPolicy struct {
	// Strict makes a skip an error unless its reason is allowed
	// (allowedSkips) or Expected.
	Strict bool
	// Expected matches the reasons of skips that the machine running the
	// suite declares it cannot meet, as a CI runner that lacks something
	// the suite needs does (NODEDNS_EXPECTED_SKIPS). They are listed as
	// expected, never as errors. Nil: none.
	Expected *regexp.Regexp
}

// Report writes the summary of t for a person: tests run, passed, failed
// and skipped, and each distinct skip reason with its count; gotestsum's
// summary above it lists the failures. With p.Strict, a skip whose reason
// is neither in allowedSkips nor matched by p.Expected is marked as an
// error. It returns whether the run is a success: nothing failed and, with
// p.Strict, every skip is allowed or expected.
func Report(w io.Writer, t *Tally, p SkipPolicy) bool {
	run := t.Passed + t.Failed + t.Skipped
	fmt.Fprintf(w, "\n==== test summary ====\n")
	fmt.Fprintf(w, "tests: %d run (subtests included): %d passed, %d failed, %d skipped\n", run, t.Passed, t.Failed, t.Skipped)
	groups := t.SkipGroups()
	disallowed, expected := 0, 0
	if len(groups) > 0 {
		fmt.Fprintf(w, "\nskipped, by reason (%d distinct):\n", len(groups))
	}
	for _, g := range groups {
		mark := ""
		if why := skipAllowed(g.Reason); why != "" {
			mark = "   [allowed: " + why + "]"
		} else if p.Expected != nil && p.Expected.MatchString(g.Reason) {
			mark = "   [expected on this machine: NODEDNS_EXPECTED_SKIPS]"
			expected += len(g.Skips)
		} else if p.Strict {
			mark = "   [ERROR: this machine should run it]"
			disallowed += len(g.Skips)
		}
		fmt.Fprintf(w, "  %4d  %s%s\n", len(g.Skips), g.Reason, mark)
		for i, s := range g.Skips {
			if i == examplesPerReason {
				fmt.Fprintf(w, "        ... and %d more\n", len(g.Skips)-i)
				break
			}
			loc := ""
			if s.Loc != "" {
				loc = " (" + s.Loc + ")"
			}
			fmt.Fprintf(w, "        %s %s%s\n", s.Package, s.Test, loc)
		}
	}
	ok := t.OK() && disallowed == 0
	var verdict []string
	if !t.OK() {
		verdict = append(verdict, fmt.Sprintf("failed: %d tests, %d packages (listed by gotestsum above)", t.Failed, t.FailedPackages))
	}
	if disallowed > 0 {
		verdict = append(verdict, fmt.Sprintf("%d tests skipped for reasons this machine should meet (NODEDNS_STRICT_SKIPS=1; allowed reasons: tools/testsummary/allow.go)", disallowed))
	}
	switch {
	case ok && expected > 0:
		fmt.Fprintf(w, "\nPASS (%d passed, %d skipped, %d of them expected on this machine: NODEDNS_EXPECTED_SKIPS=%s)\n", t.Passed, t.Skipped, expected, p.Expected)
	case ok:
		fmt.Fprintf(w, "\nPASS (%d passed, %d skipped)\n", t.Passed, t.Skipped)
	default:
		fmt.Fprintf(w, "\nFAIL: %s\n", strings.Join(verdict, "; "))
	}
	return ok
}
