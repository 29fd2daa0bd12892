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

// TestUDPSocketMemory measures the heap one UDP socket costs: a server
// with 16 sockets beside one with 1, on one address each; the difference
// over 15 is the figure (-v prints it). The cap's reasoning rests on it.
func TestUDPSocketMemory(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	sized := func(n int) int64 {
		before := heap()
		startServer(t, Config{UDPSockets: n}, &fakeHandler{})
		return heap() - before
	}
	one, many := sized(1), sized(16)
	per := (many - one) / 15
	t.Logf("heap per UDP socket: %d KiB (1 socket: %d KiB, 16: %d KiB)", per>>10, one>>10, many>>10)
	if per <= 0 {
		t.Errorf("16 sockets took %d bytes, 1 took %d: no cost per socket measured", many, one)
	}
}
