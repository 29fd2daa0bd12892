package main

import (
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEListsHoldFlags checks the HOLDER section against the flags of
// `hold`, as TestREADMEListsEveryFlag does FLAGS against the frontend's.
func TestREADMEListsHoldFlags(t *testing.T) {
	sec := readmeSection(t, "HOLDER")
	entry := regexp.MustCompile("(?m)^- `--?([a-z-]+)(?:=[^`]*)?` \\(default (none|`[^`]*`)\\)")
	listed := map[string]string{}
	for _, m := range entry.FindAllStringSubmatch(sec, -1) {
		listed[m[1]] = strings.Trim(m[2], "`")
	}
	var cfg holdConfig
	newHoldFlagSet(&cfg, io.Discard).VisitAll(func(f *flag.Flag) {
		want := f.DefValue
		if want == "" {
			want = "none"
		}
		switch got, ok := listed[f.Name]; {
		case !ok:
			t.Errorf("README.md HOLDER lacks --%s (default %s)", f.Name, want)
		case got != want:
			t.Errorf("README.md HOLDER: --%s default %q, the flag's is %q", f.Name, got, want)
		}
		delete(listed, f.Name)
	})
	for name := range listed {
		t.Errorf("README.md HOLDER lists --%s, which is not a flag of hold", name)
	}
}

func TestHoldFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--holder-dir=/run/h"}, true},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=5s", "--log-level=debug"}, true},
		{nil, false},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=30"}, false},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=0s"}, false},
		{[]string{"--holder-dir=/run/h", "--log-level=loud"}, false},
		{[]string{"--holder-dir=/run/h", "extra"}, false},
	} {
		_, err := parseHoldConfig(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("hold %q: %v, want ok %v", tc.args, err, tc.ok)
		}
		if tc.ok {
			continue
		}
		if code := realMain(append([]string{"hold"}, tc.args...), io.Discard, io.Discard); code != 2 {
			t.Errorf("hold %q: exit %d, want 2", tc.args, code)
		}
	}
}
