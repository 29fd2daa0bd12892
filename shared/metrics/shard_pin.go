//go:build !go1.28 && !nodedns_nolinkname

package metrics

import _ "unsafe" // go:linkname

// procPin disables preemption of the calling goroutine and returns the id
// of the P it runs on, between 0 and GOMAXPROCS-1; procUnpin undoes it.
// Nothing between the two calls may block. See shard.go for why this file
// builds only with the Go releases known to keep them.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// pinned says which implementation of takeShard this build has.
const pinned = true

// takeShard pins the caller to its P and returns that P's token. t is
// only read until putShard, so one value per call is enough and nothing
// is allocated: it stays on the caller's stack.
func takeShard() shardToken { return shardToken{n: procPin()} }

// putShard unpins the caller.
func putShard(shardToken) { procUnpin() }
