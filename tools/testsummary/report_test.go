package main

import (
	"regexp"
	"strings"
	"testing"
)

// skipEvents returns the events of one test that skips with reason.
func skipEvents(pkg, test, reason string) []Event {
	return []Event{
		{Action: "run", Package: pkg, Test: test},
		{Action: "output", Package: pkg, Test: test, Output: "=== RUN   " + test + "\n"},
		{Action: "output", Package: pkg, Test: test, Output: "    x_test.go:7: " + reason + "\n"},
		{Action: "output", Package: pkg, Test: test, Output: "--- SKIP: " + test + " (0.00s)\n"},
		{Action: "skip", Package: pkg, Test: test},
	}
}

func passEvents(pkg, test string) []Event {
	return []Event{
		{Action: "run", Package: pkg, Test: test},
		{Action: "pass", Package: pkg, Test: test},
	}
}

func TestReport(t *testing.T) {
	const notRoot = "kernel test: needs root to create network namespaces (run as root: sudo go test)"
	const ipvs = "no IPVS in this kernel"
	const cgroupV2 = "real nodes: no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids: real nodes are set up for cgroup v1"
	expected := regexp.MustCompile(`^real nodes: no cgroup v1 `)
	tests := []struct {
		name     string
		events   [][]Event
		strict   bool
		expected *regexp.Regexp
		ok       bool
		want     []string // lines the summary must hold
	}{
		{
			name:   "skips count as a pass without strict",
			events: [][]Event{passEvents("p", "TestA"), skipEvents("p", "TestB", notRoot), skipEvents("p", "TestC", notRoot)},
			ok:     true,
			want: []string{
				"tests: 3 run (subtests included): 1 passed, 0 failed, 2 skipped",
				"skipped, by reason (1 distinct):",
				"     2  " + notRoot + "\n",
				"        p TestB (x_test.go:7)",
				"PASS (1 passed, 2 skipped)",
			},
		},
		{
			name:   "strict: a skip root would cure is an error",
			events: [][]Event{passEvents("p", "TestA"), skipEvents("p", "TestB", notRoot)},
			strict: true,
			want: []string{
				"     1  " + notRoot + "   [ERROR: this machine should run it]",
				"FAIL: 1 tests skipped for reasons this machine should meet",
			},
		},
		{
			name:   "strict: a reason no machine of this kind meets is allowed",
			events: [][]Event{passEvents("p", "TestA"), skipEvents("p", "TestB", ipvs)},
			strict: true,
			ok:     true,
			want:   []string{"     1  " + ipvs + "   [allowed: the kernel has no IPVS", "PASS (1 passed, 1 skipped)"},
		},
		{
			name:     "strict: a reason the machine declares expected passes, and is counted",
			events:   [][]Event{passEvents("p", "TestA"), skipEvents("p", "TestB", cgroupV2), skipEvents("p", "TestC", ipvs)},
			strict:   true,
			expected: expected,
			ok:       true,
			want: []string{
				"     1  " + cgroupV2 + "   [expected on this machine: NODEDNS_EXPECTED_SKIPS]",
				"PASS (1 passed, 2 skipped, 1 of them expected on this machine: NODEDNS_EXPECTED_SKIPS=^real nodes: no cgroup v1 )",
			},
		},
		{
			name:     "strict: an expected reason excuses no other skip",
			events:   [][]Event{passEvents("p", "TestA"), skipEvents("p", "TestB", cgroupV2), skipEvents("p", "TestC", notRoot)},
			strict:   true,
			expected: expected,
			want: []string{
				"     1  " + notRoot + "   [ERROR: this machine should run it]",
				"FAIL: 1 tests skipped for reasons this machine should meet",
			},
		},
		{
			name: "a failure fails the report, strict or not",
			events: [][]Event{passEvents("p", "TestA"), {
				{Action: "run", Package: "p", Test: "TestF"},
				{Action: "fail", Package: "p", Test: "TestF"},
				{Action: "fail", Package: "p"},
			}},
			want: []string{"tests: 2 run (subtests included): 1 passed, 1 failed, 0 skipped", "FAIL: failed: 1 tests, 1 packages"},
		},
		{
			name:   "more than three tests under one reason are elided",
			events: [][]Event{skipEvents("p", "T1", notRoot), skipEvents("p", "T2", notRoot), skipEvents("p", "T3", notRoot), skipEvents("p", "T4", notRoot), skipEvents("p", "T5", notRoot)},
			ok:     true,
			want:   []string{"     5  " + notRoot, "        p T3 (x_test.go:7)\n        ... and 2 more\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewTally()
			for _, evs := range tt.events {
				for _, ev := range evs {
					r.Add(ev)
				}
			}
			r.Close()
			var out strings.Builder
			if ok := Report(&out, r, SkipPolicy{Strict: tt.strict, Expected: tt.expected}); ok != tt.ok {
				t.Errorf("Report = %v, want %v", ok, tt.ok)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
