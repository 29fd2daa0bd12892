//go:build go1.28 || nodedns_nolinkname

package metrics

// pinned says which implementation of takeShard this build has.
const pinned = false

// takeShard returns the calling P's token from the pool (shard.go).
func takeShard() *shardToken { return poolTake() }

// putShard gives t back.
func putShard(t *shardToken) { poolPut(t) }
