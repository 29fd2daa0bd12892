package main

import (
	"io"
	"slices"
	"testing"
)

// TestReleaseToDefault: --release-to defaults to --service-ip, and given
// empty it turns the release table off.
func TestReleaseToDefault(t *testing.T) {
	base := []string{"--mode=link-local", "--local-ip=169.254.20.10", "--service-ip=10.96.0.10"}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{nil, "10.96.0.10"},
		{[]string{"--release-to=10.96.0.53"}, "10.96.0.53"},
		{[]string{"--release-to="}, ""},
	} {
		cfg, err := parseConfig(append(slices.Clone(base), tc.extra...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.extra, err)
		}
		got := ""
		for _, ip := range cfg.releaseToIPs() {
			got += ip.String()
		}
		if got != tc.want {
			t.Errorf("%v: release to %q, want %q", tc.extra, got, tc.want)
		}
	}
	if _, err := parseConfig([]string{"--release-to=nonsense"}, io.Discard); err == nil {
		t.Error("--release-to=nonsense accepted")
	}
}
