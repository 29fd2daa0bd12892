package main

import (
	"runtime/debug"
	"testing"
)

func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	for _, tc := range []struct {
		name, gogc string
		want       int
	}{
		{"unset", "", defaultGCPercent},
		{"set by GOGC", "100", 100},
		{"off by GOGC", "off", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			setGCPercent(func(k string) string {
				if k == "GOGC" {
					return tc.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent = %d, want %d", got, tc.want)
			}
		})
	}
}
