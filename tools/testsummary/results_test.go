package main

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// readRecorded reads a recorded `go test -json` run from testdata. The
// recordings come from a throwaway module whose tests pass, fail, skip
// (with and without a reason, over several lines, in a subtest), panic,
// time out, and fail to build: see testdata/README.
func readRecorded(t *testing.T, name string) *Results {
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
		pkgPass, pkgFail, pkgNo int
		failures                []string // package-relative test names, in the order they ended
		failedPackages          []string // "name: why"
		ok                      bool
	}{
		{
			file: "failures.json", passed: 9, failed: 5, skipped: 6,
			pkgPass: 0, pkgFail: 4, pkgNo: 1,
			failures: []string{"a TestFail", "a TestSub/bad", "a TestSub", "crash TestPanic", "hang TestHang"},
			failedPackages: []string{
				"a: tests failed", "broken: build failed (its errors are printed above)", "crash: tests failed", "hang: tests failed",
			},
		},
		{
			file: "pass.json", passed: 2, failed: 0, skipped: 1,
			pkgPass: 1, pkgFail: 0, pkgNo: 1, ok: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r := readRecorded(t, tt.file)
			if r.Passed != tt.passed || r.Failed != tt.failed || r.Skipped != tt.skipped {
				t.Errorf("passed, failed, skipped = %d, %d, %d; want %d, %d, %d",
					r.Passed, r.Failed, r.Skipped, tt.passed, tt.failed, tt.skipped)
			}
			if p, f, n := r.Packages(); p != tt.pkgPass || f != tt.pkgFail || n != tt.pkgNo {
				t.Errorf("packages ok, failed, without tests = %d, %d, %d; want %d, %d, %d",
					p, f, n, tt.pkgPass, tt.pkgFail, tt.pkgNo)
			}
			var failures, pkgs []string
			for _, f := range r.Failures {
				failures = append(failures, short(f.Package)+" "+f.Test)
			}
			for _, f := range r.FailedPackages {
				pkgs = append(pkgs, short(f.Package)+": "+f.Why)
			}
			if !reflect.DeepEqual(failures, tt.failures) {
				t.Errorf("failures = %q, want %q", failures, tt.failures)
			}
			if !reflect.DeepEqual(pkgs, tt.failedPackages) {
				t.Errorf("failed packages = %q, want %q", pkgs, tt.failedPackages)
			}
			if r.OK() != tt.ok {
				t.Errorf("OK() = %v, want %v", r.OK(), tt.ok)
			}
		})
	}
}

// short drops the recording module's path.
func short(pkg string) string { return strings.TrimPrefix(pkg, "example.com/tsample/") }

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

// TestLiveOutput checks what a person sees while the run goes: failing
// tests' whole output, build errors, package lines, the tests a timeout
// interrupted before their package's FAIL line; not passing or skipped
// tests' logs.
func TestLiveOutput(t *testing.T) {
	f, err := os.Open("testdata/failures.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var live strings.Builder
	r := NewResults(&live)
	if err := r.Read(f, nil); err != nil {
		t.Fatal(err)
	}
	r.Close()
	out := live.String()
	for _, want := range []string{
		"# example.com/tsample/a\n=== RUN   TestFail\n    a_test.go:22: about to fail\n    a_test.go:23: got 1, want 2\n--- FAIL: TestFail",
		"FAIL\texample.com/tsample/a\t",
		"# example.com/tsample/crash\n=== RUN   TestPanic",
		"broken/b_test.go:5:28: undefined: undefined",
		"?   \texample.com/tsample/notests\t[no test files]",
		"panic: assignment to entry in nil map",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("live output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"a_test.go:9: fine", "kernel test: needs root", "--- PASS", "\nPASS\n"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("live output shows %q, which passed or skipped", unwanted)
		}
	}
	hang, fail := strings.Index(out, "panic: test timed out"), strings.Index(out, "FAIL\texample.com/tsample/hang")
	if hang < 0 || fail < 0 || hang > fail {
		t.Errorf("the timed-out test's output (at %d) should come before its package's FAIL line (at %d)", hang, fail)
	}
}

// TestTruncatedStream checks that a stream cut off mid-package (the
// command was killed) counts the running tests and their package as
// failed instead of passing silently.
func TestTruncatedStream(t *testing.T) {
	r := NewResults(nil)
	r.Add(Event{Action: "start", Package: "p"})
	r.Add(Event{Action: "run", Package: "p", Test: "TestA"})
	r.Add(Event{Action: "output", Package: "p", Test: "TestA", Output: "=== RUN   TestA\n"})
	r.Close()
	if r.OK() || r.Failed != 1 || len(r.FailedPackages) != 1 {
		t.Errorf("OK=%v failed=%d failed packages=%v; want the test and its package failed", r.OK(), r.Failed, r.FailedPackages)
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
