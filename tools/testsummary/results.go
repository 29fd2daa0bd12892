package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
)

// maxLine bounds one line of `go test -json` output; test2json splits
// longer output lines itself, so this only guards against a broken stream.
const maxLine = 16 << 20

// Results accumulates the events of one or more `go test -json` runs.
// The zero value is not usable: call NewResults.
type Results struct {
	// live, when non-nil, receives what a person watching the run needs:
	// package result lines, build errors, and the whole output of every
	// failing test as it fails. Passing and skipped tests stay quiet.
	live io.Writer

	running  map[testID]*testRun // started and not yet ended; keyed by package and name
	order    []testID            // running's keys in start order, for a stable report
	packages map[string]string   // package → its last terminal action

	Passed, Failed, Skipped int
	// Failures lists failed tests and tests that never ended (their
	// package timed out or crashed), in the order they ended.
	Failures []Failure
	// Skips lists every skipped test with its reason.
	Skips []Skip
	// FailedPackages lists packages that failed, with why when no test
	// of theirs failed (build failure, crash outside a test).
	FailedPackages []Failure
	// Unparsed counts stdout lines that were not test2json events.
	Unparsed int

	// lastBlock is the package of the last test output echoed, "" after
	// a package's own line: go test interleaves packages' events, so a
	// block of another package's test output gets a header naming it.
	lastBlock string
}

type testID struct{ pkg, name string }

type testRun struct {
	output  []string
	loc     string // file:line of the test's last log or skip message
	reason  string // text of that message
	reasonN int    // continuation lines after it
}

// Failure is a failed test (Test set) or package (Test empty).
type Failure struct {
	Package, Test string
	// Why is a short description for the summary: a test's panic line or
	// "did not finish", a package's "build failed" and the like; empty
	// for a test that failed through t.Error or t.Fatal (its output says).
	Why string
	// Output is the test's whole output.
	Output []string
}

// Skip is one skipped test.
type Skip struct {
	Package, Test string
	// Loc is the file:line of the t.Skip call ("" when SkipNow gave none).
	Loc string
	// Reason is the first line of the skip message, or noReason.
	Reason string
}

// noReason stands for a skip without a message (t.SkipNow).
const noReason = "(no reason given: t.SkipNow)"

// NewResults returns empty Results; live may be nil.
func NewResults(live io.Writer) *Results {
	return &Results{live: live, running: map[testID]*testRun{}, packages: map[string]string{}}
}

// Read adds every line of r, echoing to live as it goes. Lines that are
// not events are echoed and counted in Unparsed. copyTo, when non-nil,
// receives every line unchanged (the recording of a run).
func (r *Results) Read(in io.Reader, copyTo io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if copyTo != nil {
			if _, err := fmt.Fprintf(copyTo, "%s\n", line); err != nil {
				return fmt.Errorf("record test output: %w", err)
			}
		}
		ev, ok := parseEvent(line)
		if !ok {
			r.Unparsed++
			r.echo(string(line) + "\n")
			continue
		}
		r.Add(ev)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read go test -json output: %w", err)
	}
	return nil
}

// Add accounts for one event.
func (r *Results) Add(ev Event) {
	switch ev.Action {
	case "build-output":
		r.echo(ev.Output)
		return
	case "build-fail":
		return
	}
	if ev.Test == "" {
		r.addPackage(ev)
		return
	}
	id := testID{ev.Package, ev.Test}
	t := r.running[id]
	if t == nil {
		t = &testRun{}
		r.running[id] = t
		r.order = append(r.order, id)
	}
	switch ev.Action {
	case "output":
		t.output = append(t.output, ev.Output)
		if loc, text, ok := message(ev.Output); ok {
			t.loc, t.reason, t.reasonN = loc, text, 0
		} else if t.reason != "" && strings.HasPrefix(ev.Output, "    ") && !strings.HasPrefix(strings.TrimLeft(ev.Output, " "), "--- ") {
			t.reasonN++
		}
	case "pass":
		r.Passed++
		r.end(id)
	case "skip":
		r.Skipped++
		s := Skip{Package: ev.Package, Test: ev.Test, Loc: t.loc, Reason: t.reason}
		if s.Reason == "" {
			s.Reason = noReason
		} else if t.reasonN > 0 {
			s.Reason += fmt.Sprintf(" (+%d lines)", t.reasonN)
		}
		r.Skips = append(r.Skips, s)
		r.end(id)
	case "fail":
		r.Failed++
		f := Failure{Package: ev.Package, Test: ev.Test, Why: panicLine(t.output), Output: t.output}
		r.Failures = append(r.Failures, f)
		r.echoTest(ev.Package, t.output)
		r.end(id)
	}
}

// addPackage handles an event of a package as a whole.
func (r *Results) addPackage(ev Event) {
	switch ev.Action {
	case "output":
		if strings.HasPrefix(ev.Output, "FAIL\t") {
			// A timeout or crash: show the tests it interrupted before
			// the package's result line, as go test without -json does.
			r.unfinished(ev.Package)
		}
		if ev.Output != "PASS\n" { // go test without -v prints only "ok pkg"
			r.echo(ev.Output)
			r.lastBlock = ""
		}
	case "pass", "skip":
		r.packages[ev.Package] = ev.Action
		r.unfinished(ev.Package)
	case "fail":
		r.packages[ev.Package] = ev.Action
		failedTests := r.unfinished(ev.Package)
		for _, f := range r.Failures {
			if f.Package == ev.Package {
				failedTests = true
			}
		}
		why := "tests failed"
		switch {
		case ev.FailedBuild != "":
			why = "build failed (its errors are printed above)"
		case !failedTests:
			why = "failed outside any test (TestMain, init, or the test binary crashed)"
		}
		r.FailedPackages = append(r.FailedPackages, Failure{Package: ev.Package, Why: why})
	}
}

// unfinished counts as failed every test of pkg that started and never
// ended, which happens when the package times out or crashes, and
// reports whether there was one.
func (r *Results) unfinished(pkg string) bool {
	any := false
	for _, id := range r.order {
		t := r.running[id]
		if id.pkg != pkg || t == nil {
			continue
		}
		any = true
		r.Failed++
		r.Failures = append(r.Failures, Failure{Package: id.pkg, Test: id.name, Why: "did not finish (its package timed out or crashed)", Output: t.output})
		r.echoTest(pkg, append(t.output, fmt.Sprintf("--- DID NOT FINISH: %s (package %s ended first)\n", id.name, pkg)))
		delete(r.running, id)
	}
	return any
}

func (r *Results) end(id testID) { delete(r.running, id) }

// Close counts as failed the tests still running when the stream ended
// (the command was killed before its package ended).
func (r *Results) Close() {
	pkgs := map[string]bool{}
	for _, id := range r.order {
		if r.running[id] != nil && !pkgs[id.pkg] {
			pkgs[id.pkg] = true
			r.unfinished(id.pkg)
			r.FailedPackages = append(r.FailedPackages, Failure{Package: id.pkg, Why: "output ended before the package did"})
		}
	}
	r.order = nil
}

// Packages counts packages by their last terminal action: pass, fail,
// skip (no test files).
func (r *Results) Packages() (pass, fail, skip int) {
	for _, a := range r.packages {
		switch a {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return pass, fail, skip
}

// OK reports whether nothing failed.
func (r *Results) OK() bool {
	return r.Failed == 0 && len(r.FailedPackages) == 0
}

// echoTest echoes a test's output, under a header naming its package
// unless the previous block was of the same package.
func (r *Results) echoTest(pkg string, output []string) {
	if r.lastBlock != pkg {
		r.echo("# " + pkg + "\n")
		r.lastBlock = pkg
	}
	r.echo(output...)
}

func (r *Results) echo(lines ...string) {
	if r.live == nil {
		return
	}
	for _, l := range lines {
		io.WriteString(r.live, l)
	}
}

// panicLine returns the first panic line of a failed test's output, or "".
func panicLine(output []string) string {
	for _, l := range output {
		if strings.HasPrefix(l, "panic: ") {
			return strings.TrimRight(l, "\n")
		}
	}
	return ""
}

// SkipGroup is one distinct skip reason and the tests that gave it.
type SkipGroup struct {
	Reason string
	Skips  []Skip
}

// SkipGroups groups Skips by reason, most frequent first, ties by reason.
func (r *Results) SkipGroups() []SkipGroup {
	by := map[string]*SkipGroup{}
	var groups []*SkipGroup
	for _, s := range r.Skips {
		g := by[s.Reason]
		if g == nil {
			g = &SkipGroup{Reason: s.Reason}
			by[s.Reason] = g
			groups = append(groups, g)
		}
		g.Skips = append(g.Skips, s)
	}
	sort.SliceStable(groups, func(i, j int) bool {
		if len(groups[i].Skips) != len(groups[j].Skips) {
			return len(groups[i].Skips) > len(groups[j].Skips)
		}
		return groups[i].Reason < groups[j].Reason
	})
	out := make([]SkipGroup, len(groups))
	for i, g := range groups {
		out[i] = *g
	}
	return out
}
