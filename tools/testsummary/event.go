package main

import (
	"encoding/json"
	"strings"
)

// Event is one line of `go test -json` output, as cmd/test2json writes it
// (`go doc cmd/test2json`). Only the fields the summary reads are kept.
type Event struct {
	// Action is one of start, run, pause, cont, pass, fail, skip, bench,
	// output, build-output and build-fail.
	Action string
	// Package is the import path of the test binary's package; empty on
	// build-output and build-fail events.
	Package string
	// Test names the test or subtest the event belongs to; empty for
	// events of the package as a whole.
	Test string
	// Output is one line of output, newline included, on output events.
	Output string
}

// parseEvent decodes one line. ok is false when the line is not a
// test2json event (a stray line a command wrote to stdout).
func parseEvent(line []byte) (ev Event, ok bool) {
	if len(line) == 0 || line[0] != '{' {
		return Event{}, false
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
		return Event{}, false
	}
	return ev, true
}

// terminal reports whether the action ends a test or a package.
func terminal(action string) bool {
	return action == "pass" || action == "fail" || action == "skip"
}

// message returns the text of a line that testing.T's Log, Error or Skip
// wrote ("    file_test.go:12: text"), and whether the line is one.
// Continuation lines of a multi-line message carry no file:line prefix.
func message(line string) (loc, text string, ok bool) {
	s := strings.TrimLeft(line, " ")
	if len(s) == len(line) { // test log lines are always indented
		return "", "", false
	}
	loc, text, ok = strings.Cut(strings.TrimRight(s, "\n"), ": ")
	if !ok {
		return "", "", false
	}
	file, lineno, ok := strings.Cut(loc, ":")
	if !ok || !strings.HasSuffix(file, ".go") || lineno == "" || strings.Trim(lineno, "0123456789") != "" {
		return "", "", false
	}
	return loc, text, true
}
