package server

import (
	"runtime"
	"testing"
)

// TestDefaultUDPSockets: one socket per GOMAXPROCS up to the cap; an
// explicit count is kept.
func TestDefaultUDPSockets(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ procs, set, want int }{
		{1, 0, 1}, {2, 0, 2}, {16, 0, DefaultMaxUDPSockets}, {64, 0, DefaultMaxUDPSockets}, {64, 8, 8},
	} {
		runtime.GOMAXPROCS(tc.procs)
		if got := (Config{UDPSockets: tc.set}).withDefaults().UDPSockets; got != tc.want {
			t.Errorf("GOMAXPROCS=%d, UDPSockets=%d: %d sockets, want %d", tc.procs, tc.set, got, tc.want)
		}
	}
}
