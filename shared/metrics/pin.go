package metrics

import _ "unsafe" // go:linkname

// procPin disables preemption of the calling goroutine and returns the id
// of the P it runs on, between 0 and GOMAXPROCS-1; procUnpin undoes it.
// sync.Pool finds its per-P pool the same way. The runtime keeps both
// names reachable by linkname and their signatures fixed (go.dev/issue/67401).
// Nothing between the two calls may block.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
