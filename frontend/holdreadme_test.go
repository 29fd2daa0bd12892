package main

import (
	"io"
	"testing"
)

// TestREADMEListsHoldFlags checks the HOLDER section against the flags of
// `hold`, as TestREADMEListsEveryFlag does FLAGS against the frontend's.
func TestREADMEListsHoldFlags(t *testing.T) {
	var cfg holdConfig
	checkFlagsListed(t, "HOLDER", newHoldFlagSet(&cfg, io.Discard))
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
