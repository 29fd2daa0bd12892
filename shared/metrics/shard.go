package metrics

import (
	"sync"
	"sync/atomic"
)

// Which shard an update goes to: takeShard returns a token whose number
// picks the shard, and putShard ends the update. Two implementations:
//
//   - shard_pin.go, built by Go 1.27 and older (1.26 and 1.27 checked):
//     the token is the P's id, from runtime.procPin, which sync.Pool also
//     uses and which the runtime keeps reachable by go:linkname for the
//     packages that use it (go.dev/issue/67401). Cheaper than the pool:
//     BenchmarkShardToken (go test -run '^$' -bench ShardToken
//     ./shared/metrics) compares the two.
//   - shard_pool.go, built by Go 1.28 on and with -tags
//     nodedns_nolinkname: the token comes from a sync.Pool, the runtime's
//     per-P storage through its public API. A release that drops procPin
//     thus still builds and passes; once a release is known to keep it,
//     raise the bound in both files' build lines.
//
// With the pool a goroutine may move to another P during an update, and
// the garbage collector empties pools (new tokens get new numbers), so
// that for a while two Ps may write one shard. Updates are atomic, so that
// costs a shared cache line, never a count.

// shardToken is the right to write shard n & mask of every block while it
// is held.
type shardToken struct{ n int }

var (
	// tokensMade numbers the pool's tokens, so that new ones spread over
	// the shards.
	tokensMade atomic.Uint64
	tokens     = sync.Pool{New: func() any { return &shardToken{n: int(tokensMade.Add(1) - 1)} }}
)

// poolTake returns the calling P's token from the pool: in the steady
// state, the one that P put back after its previous update (the pool's
// private object of that P), so that each P keeps writing its own shard.
func poolTake() *shardToken { return tokens.Get().(*shardToken) }

// poolPut gives t back to the pool of the P the caller runs on.
func poolPut(t *shardToken) { tokens.Put(t) }
