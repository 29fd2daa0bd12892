package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun checks the exit statuses and the NODEDNS_STRICT_SKIPS default:
// pass.json has one skip a root run cures; failures.json has failures.
func TestRun(t *testing.T) {
	tests := []struct {
		env  string
		args []string
		want int
	}{
		{"", []string{"testdata/pass.json"}, 0},
		{"1", []string{"testdata/pass.json"}, 1},
		{"1", []string{"-strict-skips=false", "testdata/pass.json"}, 0},
		{"", []string{"-strict-skips", "testdata/pass.json"}, 1},
		{"1", []string{"-expected-skips", "^kernel test: needs root$", "testdata/pass.json"}, 0},
		{"1", []string{"-expected-skips", "^other reason$", "testdata/pass.json"}, 1},
		{"1", []string{"-expected-skips", "(", "testdata/pass.json"}, 2},
		{"", []string{"testdata/pass.json", "testdata/failures.json"}, 1},
		{"", []string{"testdata/nonexistent.json"}, 1},
		{"", []string{"-no-such-flag", "testdata/pass.json"}, 2},
		{"", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.env+strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv("NODEDNS_STRICT_SKIPS", tt.env)
			t.Setenv("NODEDNS_EXPECTED_SKIPS", "")
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.want {
				t.Errorf("exit status %d, want %d\n%s%s", code, tt.want, stdout.String(), stderr.String())
			}
		})
	}
}
