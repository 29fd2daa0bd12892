package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var synopsisFlag = regexp.MustCompile(`(?:^|[\s\[])-([a-z][a-z0-9-]*)`)

// TestScenarioREADMEFlags checks the SYNOPSIS of the load, compare and demo
// man pages against the flags the commands define, both ways.
func TestScenarioREADMEFlags(t *testing.T) {
	for _, tc := range []struct {
		readme   string
		commands []string
	}{
		{"gen/README.md", []string{"load"}},
		{"scenario/README.md", []string{"compare", "demo"}},
	} {
		b, err := os.ReadFile(tc.readme)
		if err != nil {
			t.Fatal(err)
		}
		_, syn, _ := strings.Cut(string(b), "## SYNOPSIS")
		syn, _, _ = strings.Cut(syn, "## DESCRIPTION")
		var documented []string
		for _, m := range synopsisFlag.FindAllStringSubmatch(syn, -1) {
			documented = append(documented, m[1])
		}
		for _, cmd := range tc.commands {
			var usage strings.Builder
			_ = run(context.Background(), []string{cmd, "-h"}, &usage, &usage)
			var defined []string
			for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(usage.String(), -1) {
				defined = append(defined, m[1])
			}
			if len(defined) == 0 {
				t.Fatalf("%s -h printed no flags:\n%s", cmd, usage.String())
			}
			for _, f := range defined {
				if !slices.Contains(documented, f) {
					t.Errorf("%s: flag -%s is not in the SYNOPSIS of %s", cmd, f, tc.readme)
				}
			}
			if cmd == "demo" {
				continue // the SYNOPSIS lists compare's flags once
			}
			for _, f := range documented {
				if !slices.Contains(defined, f) && f != "h" {
					t.Errorf("%s: %s documents -%s, which the command does not define", cmd, tc.readme, f)
				}
			}
		}
	}
}
