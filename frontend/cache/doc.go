// Package cache is the frontend's answer cache. It stores answers in wire
// format (without the OPT record, which is added per client on the way out)
// and writes a cache hit into the caller's buffer without allocating: the
// stored bytes are copied, then the copy gets the client's ID, flags and
// question case, aged TTLs, an OPT record when the client sent one, and the
// TC bit when it does not fit.
//
// Keys are the lowercased question name, type and class, and the DO and CD
// bits (package dnswire builds them). The cache is split into shards, each
// with its own lock, and each shard keeps positive and negative answers in
// separate segmented LRU lists: a new entry starts on probation and is
// protected only once it is asked for again, so a flood of names that are
// never repeated (a random-subdomain attack) only churns the probation
// segment and does not evict the hot set.
package cache
