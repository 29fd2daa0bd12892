package server

import (
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// srcKey is a client's address in 16-byte form (IPv4 as ::ffff:a.b.c.d),
// the key of the per-source limits. Fixed-size, so that a lookup hashes
// no string and allocates nothing.
type srcKey [16]byte

// udpSource is the key of the client whose datagram left sa. For an IPv4
// socket the kernel writes a sockaddr_in into the RawSockaddrInet6
// storage, so its address is read through that layout.
func udpSource(sa *unix.RawSockaddrInet6) srcKey {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return v4Key(sa4.Addr)
	}
	return srcKey(sa.Addr)
}

// tcpSource is the key of the client at the other end of c.
func tcpSource(c net.Conn) srcKey {
	var k srcKey
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		copy(k[:], a.IP.To16())
	}
	return k
}

func v4Key(a [4]byte) srcKey {
	return srcKey{10: 0xff, 11: 0xff, 12: a[0], 13: a[1], 14: a[2], 15: a[3]}
}

// srcShards spreads the per-source table over this many locks, so that
// the misses of different clients rarely wait for one another.
const srcShards = 64

// srcCounts is what one client holds now.
type srcCounts struct {
	misses int32 // misses in flight (ServeSlow calls)
	conns  int32 // open TCP connections
}

// sourceTable counts, per client address, the misses in flight and the
// TCP connections open. Only misses and TCP accepts touch it, never a
// cache hit. An entry exists only while its client holds something, so
// the table never holds more than MaxInflight+MaxTCPConns entries: its
// memory is bounded by the global limits, whatever the number of
// addresses that send queries.
type sourceTable struct {
	shards [srcShards]srcShard
	// missClients is the number of clients holding a miss in flight.
	missClients atomic.Int64
}

type srcShard struct {
	mu sync.Mutex           // guards m
	m  map[srcKey]srcCounts // entries with a non-zero count only
	_  [64 - 8 - 8]byte     // keeps shards on separate cache lines
}

// srcKind selects the counter of srcCounts.
type srcKind uint8

const (
	srcMisses srcKind = iota
	srcConns
)

func (t *sourceTable) shard(k srcKey) *srcShard {
	// The low bytes vary most between pods of a node (and 127.0.0.x).
	h := uint32(k[15]) | uint32(k[14])<<8 | uint32(k[13])<<16 | uint32(k[12])<<24
	h ^= uint32(k[8]) ^ uint32(k[9])<<8 ^ uint32(k[10])<<16 ^ uint32(k[11])<<24
	h *= 0x9E3779B1 // Fibonacci hashing spreads consecutive addresses
	return &t.shards[h>>26]
}

// take adds one of kind to k's count unless it already holds limit;
// false means the client is at its share.
func (t *sourceTable) take(k srcKey, kind srcKind, limit int) bool {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[srcKey]srcCounts)
	}
	c := sh.m[k]
	p := &c.misses
	if kind == srcConns {
		p = &c.conns
	}
	if int(*p) >= limit {
		return false
	}
	*p++
	if kind == srcMisses && c.misses == 1 {
		t.missClients.Add(1)
	}
	sh.m[k] = c
	return true
}

// give returns one of kind taken by k; the entry goes once k holds
// nothing.
func (t *sourceTable) give(k srcKey, kind srcKind) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c, ok := sh.m[k]
	if !ok {
		return
	}
	p := &c.misses
	if kind == srcConns {
		p = &c.conns
	}
	if *p > 0 {
		*p--
		if kind == srcMisses && c.misses == 0 {
			t.missClients.Add(-1)
		}
	}
	if c.misses == 0 && c.conns == 0 {
		delete(sh.m, k)
		return
	}
	sh.m[k] = c
}

// held returns what k holds now, for tests and debugging.
func (t *sourceTable) held(k srcKey) srcCounts {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[k]
}

// entries returns the number of clients holding something.
func (t *sourceTable) entries() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
