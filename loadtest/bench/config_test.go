package bench

import (
	"slices"
	"testing"
)

func TestWithBaseline(t *testing.T) {
	for _, tc := range []struct {
		servers  []string
		baseline string
		want     []string
	}{
		{[]string{Frontend, Unbound}, "", []string{Frontend, Unbound}},
		{[]string{Frontend, Unbound}, "/tmp/old", []string{Frontend, Baseline, Unbound}},
		{[]string{Unbound, NodeLocal}, "/tmp/old", []string{Baseline, Unbound, NodeLocal}},
		{[]string{Frontend, Baseline}, "/tmp/old", []string{Frontend, Baseline}},
	} {
		c := DefaultConfig()
		c.Servers, c.BaselineBin = tc.servers, tc.baseline
		if got := c.WithBaseline(); !slices.Equal(got, tc.want) {
			t.Errorf("servers %v, baseline %q: got %v, want %v", tc.servers, tc.baseline, got, tc.want)
		}
	}
	c := DefaultConfig()
	c.Servers = []string{Baseline}
	if err := c.Validate(); err == nil {
		t.Error("Validate accepted the baseline server without a baseline binary")
	}
}
