package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// maxLine bounds one line of `go test -json` output; test2json splits
// longer output lines itself, so this only guards against a broken stream.
const maxLine = 16 << 20

// Tally counts the tests of one or more `go test -json` runs and keeps
// each skip with its reason. The zero value is not usable: call NewTally.
type Tally struct {
	running map[testID]*testRun // started and not yet ended
	order   []testID            // running's keys in start order

	// Passed, Failed and Skipped count tests, subtests included. A test
	// still running when its package ended (a timeout, a crash) counts
	// as failed, as gotestsum counts it.
	Passed, Failed, Skipped int
	// FailedPackages counts packages whose result was fail: failed tests,
	// a failed build, a crash outside any test.
	FailedPackages int
	// Skips lists every skipped test with its reason.
	Skips []Skip
}

type testID struct{ pkg, name string }

// testRun is what a running test's output has said so far about why it
// might skip.
type testRun struct {
	loc     string // file:line of the test's last log or skip message
	reason  string // text of that message
	reasonN int    // continuation lines after it
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

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{running: map[testID]*testRun{}}
}

// Read adds every event of in; lines that are not events are ignored
// (gotestsum has shown them).
func (t *Tally) Read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		if ev, ok := parseEvent(sc.Bytes()); ok {
			t.Add(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read go test -json output: %w", err)
	}
	return nil
}

// Add accounts for one event.
func (t *Tally) Add(ev Event) {
	if ev.Test == "" {
		if terminal(ev.Action) {
			t.unfinished(ev.Package)
			if ev.Action == "fail" {
				t.FailedPackages++
			}
		}
		return
	}
	id := testID{ev.Package, ev.Test}
	r := t.running[id]
	if r == nil {
		r = &testRun{}
		t.running[id] = r
		t.order = append(t.order, id)
	}
	switch ev.Action {
	case "output":
		if loc, text, ok := message(ev.Output); ok {
			r.loc, r.reason, r.reasonN = loc, text, 0
		} else if r.reason != "" && strings.HasPrefix(ev.Output, "    ") && !strings.HasPrefix(strings.TrimLeft(ev.Output, " "), "--- ") {
			r.reasonN++
		}
	case "pass":
		t.Passed++
		delete(t.running, id)
	case "fail":
		t.Failed++
		delete(t.running, id)
	case "skip":
		t.Skipped++
		s := Skip{Package: ev.Package, Test: ev.Test, Loc: r.loc, Reason: r.reason}
		if s.Reason == "" {
			s.Reason = noReason
		} else if r.reasonN > 0 {
			s.Reason += fmt.Sprintf(" (+%d lines)", r.reasonN)
		}
		t.Skips = append(t.Skips, s)
		delete(t.running, id)
	}
}

// unfinished counts as failed every test of pkg that started and never
// ended (its package timed out or crashed).
func (t *Tally) unfinished(pkg string) {
	kept := t.order[:0]
	for _, id := range t.order {
		switch {
		case t.running[id] == nil:
		case id.pkg == pkg:
			t.Failed++
			delete(t.running, id)
		default:
			kept = append(kept, id)
		}
	}
	t.order = kept
}

// Close counts as failed the tests still running when the stream ended
// (the command was killed before their package ended), and their packages.
func (t *Tally) Close() {
	var pkgs []string
	for _, id := range t.order {
		if t.running[id] != nil && !slices.Contains(pkgs, id.pkg) {
			pkgs = append(pkgs, id.pkg)
		}
	}
	for _, p := range pkgs {
		t.unfinished(p)
		t.FailedPackages++
	}
}

// OK reports whether nothing failed.
func (t *Tally) OK() bool {
	return t.Failed == 0 && t.FailedPackages == 0
}

// SkipGroup is one distinct skip reason and the tests that gave it.
type SkipGroup struct {
	Reason string
	Skips  []Skip
}

// SkipGroups groups Skips by reason, most frequent first, ties by reason.
func (t *Tally) SkipGroups() []SkipGroup {
	by := map[string]int{}
	var groups []SkipGroup
	for _, s := range t.Skips {
		i, ok := by[s.Reason]
		if !ok {
			i = len(groups)
			by[s.Reason] = i
			groups = append(groups, SkipGroup{Reason: s.Reason})
		}
		groups[i].Skips = append(groups[i].Skips, s)
	}
	sort.SliceStable(groups, func(i, j int) bool {
		if len(groups[i].Skips) != len(groups[j].Skips) {
			return len(groups[i].Skips) > len(groups[j].Skips)
		}
		return groups[i].Reason < groups[j].Reason
	})
	return groups
}
