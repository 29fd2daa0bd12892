package metrics

import (
	"sync"
	"testing"
)

// TestPoolTokensHeldAtOnceDiffer checks the pool's tokens (shard.go),
// whichever implementation this build uses: tokens held at once are
// distinct, and their numbers too, so that goroutines holding them write
// different shards as far as the shard count allows.
func TestPoolTokensHeldAtOnceDiffer(t *testing.T) {
	const held = 64
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	var all []*shardToken
	for range held {
		wg.Go(func() {
			tok := poolTake()
			mu.Lock()
			defer mu.Unlock()
			if seen[tok.n] {
				t.Errorf("token %d handed out twice", tok.n)
			}
			seen[tok.n] = true
			all = append(all, tok)
		})
	}
	wg.Wait()
	for _, tok := range all {
		poolPut(tok)
	}
}

// BenchmarkShardToken compares the two ways an update finds its shard
// (shard.go): this build's takeShard, and the pool.
func BenchmarkShardToken(b *testing.B) {
	b.Run("build", func(b *testing.B) {
		b.Logf("pinned (runtime.procPin): %v", pinned)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				putShard(takeShard())
			}
		})
	})
	b.Run("pool", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				poolPut(poolTake())
			}
		})
	})
}
