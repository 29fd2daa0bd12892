package resolver

import "github.com/nodedns/nodedns/frontend/upstream"

// The upstream pool is the Exchanger main passes in.
var _ Exchanger = (*upstream.Pool)(nil)

// The pool counts the misses the resolver coalesces.
var _ Coalescer = (*upstream.Pool)(nil)
