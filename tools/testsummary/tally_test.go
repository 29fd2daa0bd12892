package main

import (
	"reflect"
	"strings"
	"testing"
)

// readRecorded reads a recorded `go test -json` run from testdata. The
// recordings come from a throwaway module whose tests pass, fail, skip
// (with and without a reason, over several lines, in a subtest), panic,
// time out, and fail to build: see testdata/README.
func readRecorded(t *testing.T, name string) *Tally {
	t.Helper()
	r, err := readFiles([]string{"testdata/" + name})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRecordedRuns(t *testing.T) {
	tests := []struct {
		file                    string
		passed, failed, skipped int
		failedPackages          int
		ok                      bool
	}{
		// Failed: TestFail, TestSub/bad, TestSub, TestPanic, and TestHang,
		// which its package's timeout left unfinished. Failed packages:
		// a, broken (build), crash, hang.
		{file: "failures.json", passed: 9, failed: 5, skipped: 6, failedPackages: 4},
		{file: "pass.json", passed: 2, failed: 0, skipped: 1, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r := readRecorded(t, tt.file)
			if r.Passed != tt.passed || r.Failed != tt.failed || r.Skipped != tt.skipped {
				t.Errorf("passed, failed, skipped = %d, %d, %d; want %d, %d, %d",
					r.Passed, r.Failed, r.Skipped, tt.passed, tt.failed, tt.skipped)
			}
			if r.FailedPackages != tt.failedPackages {
				t.Errorf("failed packages = %d, want %d", r.FailedPackages, tt.failedPackages)
			}
			if r.OK() != tt.ok {
				t.Errorf("OK() = %v, want %v", r.OK(), tt.ok)
			}
		})
	}
}

// TestSkipReasons checks the reason of each skip in the recording: the
// last message before "--- SKIP", a log line before it ignored, extra lines
// of a multi-line message counted, and SkipNow named as such.
func TestSkipReasons(t *testing.T) {
	r := readRecorded(t, "failures.json")
	got := map[string][2]string{}
	for _, s := range r.Skips {
		got[s.Test] = [2]string{s.Loc, s.Reason}
	}
	want := map[string][2]string{
		"TestSkipRoot":      {"a_test.go:11", "kernel test: needs root"},
		"TestSkipRootToo":   {"a_test.go:13", "kernel test: needs root"},
		"TestSkipf":         {"a_test.go:15", "dnsperf not installed: exec: not found"},
		"TestSkipNow":       {"", noReason},
		"TestSkipMultiline": {"a_test.go:19", "go mod download x: exit 1 (+2 lines)"},
		"TestSub/skipped":   {"a_test.go:33", "no IPv6 on this machine"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("skips:\n got %q\nwant %q", got, want)
	}
	groups := r.SkipGroups()
	if len(groups) != 5 || groups[0].Reason != "kernel test: needs root" || len(groups[0].Skips) != 2 {
		t.Errorf("groups = %+v, want 5 with the two root skips first", groups)
	}
}

// TestTruncatedStream checks that a stream cut off mid-package (the
// command was killed) counts the running tests and their package as
// failed instead of passing silently.
func TestTruncatedStream(t *testing.T) {
	r := NewTally()
	r.Add(Event{Action: "start", Package: "p"})
	r.Add(Event{Action: "run", Package: "p", Test: "TestA"})
	r.Add(Event{Action: "output", Package: "p", Test: "TestA", Output: "=== RUN   TestA\n"})
	r.Add(Event{Action: "run", Package: "p", Test: "TestB"})
	r.Add(Event{Action: "run", Package: "q", Test: "TestC"})
	r.Close()
	if r.OK() || r.Failed != 3 || r.FailedPackages != 2 {
		t.Errorf("OK=%v failed=%d failed packages=%d; want the three tests and their two packages failed", r.OK(), r.Failed, r.FailedPackages)
	}
}

// TestUnparsedLines checks that lines which are not events (a command's
// stray stdout) are ignored, not counted as tests.
func TestUnparsedLines(t *testing.T) {
	r := NewTally()
	in := `not json
{"Action":"run","Package":"p","Test":"TestA"}
{broken
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p"}
`
	if err := r.Read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if !r.OK() || r.Passed != 1 {
		t.Errorf("OK=%v passed=%d; want OK with 1 passed", r.OK(), r.Passed)
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		line, loc, text string
		ok              bool
	}{
		{"    a_test.go:11: kernel test: needs root\n", "a_test.go:11", "kernel test: needs root", true},
		{"        netnstest.go:33: x: y\n", "netnstest.go:33", "x: y", true},
		{"a_test.go:11: not indented\n", "", "", false},
		{"    second line of a message\n", "", "", false},
		{"    http://host:80: no\n", "", "", false},
		{"    file.go:x1: no\n", "", "", false},
		{"=== RUN   TestX\n", "", "", false},
	}
	for _, tt := range tests {
		loc, text, ok := message(tt.line)
		if loc != tt.loc || text != tt.text || ok != tt.ok {
			t.Errorf("message(%q) = %q, %q, %v; want %q, %q, %v", tt.line, loc, text, ok, tt.loc, tt.text, tt.ok)
		}
	}
}
