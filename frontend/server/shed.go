package server

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Queue-delay shedding.
//
// A cache hit costs the frontend a few microseconds; a miss costs ten
// times that here and as much again in the backend, which shares the
// node's cores. When misses come faster than the node can resolve them
// (a pod asking random names), the misses' goroutines and the backend
// take the CPU, datagrams wait in the sockets' queues, and the cache hits
// of every other pod wait behind them: beside compare's random-name flood
// (2,000 lookups a second, twelve thousand misses) hits waited about a
// second at the median, with 2,000 misses in flight over 1,000 backend
// connections.
//
// Each UDP socket therefore has the kernel stamp every datagram on
// arrival (SO_TIMESTAMPNS). Its reader looks at the stamp of the first
// datagram of each batch, the oldest queued, and keeps the smallest such
// delay over a window of shedWindow. A window whose every batch waited
// longer than the target (Config.ShedDelay) shows a standing queue; once
// every window of shedSustain has, it is not a burst: the server's limit
// on misses in flight then drops, window after window, to three
// quarters of the misses in flight, never under shedFloor, and the
// misses past it are answered by Handler.Overloaded (stale when it can,
// else SERVFAIL, both at the cost of a hit), unless their client holds
// less than an equal share of it (Server.acquire): the flooding pod is
// refused, the few misses of the others are not. A window whose smallest
// delay is under half the target raises the limit by an eighth, up to
// Config.MaxInflight. A limit on misses in flight, not a share of them
// refused, because an admitted miss costs CPU for as long as it waits in
// the backend's queue: the limit bounds that queue at once, where a
// share would act only once the queue had already formed.
//
// The queue of a start is not a flood: after a crash the socket holder
// keeps the sockets and the queries of the restart's second wait for the
// new instance, whose cache is empty, so that for a while every batch
// waits and nearly every query misses, names that the next lookups will
// find cached. Refusing those misses fails lookups a moment's wait would
// have answered: in compare's chaos run, a frontend SIGKILL had 155 and
// 106 lookups answered SERVFAIL that way. The limit therefore does not
// drop in the first shedArmAfter after the start. The same holds, shorter,
// for any burst of new names, hence shedSustain.
//
// The limit drops only after a window in which the server started at
// least shedMinStarted misses per P: a queue that builds while few misses
// start comes from something else taking the CPU (another pod, or the
// rest of the queries), and refusing misses would fail lookups without
// shortening it. The count of misses in flight would not tell: names that
// hang upstream hold slots for seconds at no cost.
//
// Readers keep their window to themselves (no shared write on the hit
// path) and at most one of them moves the limit per window. They do not
// all see the same queue: the kernel spreads datagrams over the sockets
// by a hash of their addresses and ports, so a pod flooding from one
// socket fills one socket's queue while the others stay empty. A window
// that stood is therefore noted (Server.standingAt) by whichever reader
// saw it, and the queue stands for the reader moving the limit while any
// reader saw it stand in the last two windows: a quiet socket's short
// waits neither restart the count of shedSustain nor raise the limit
// beside a socket whose queue stands.

const (
	shedWindow = 25 * time.Millisecond
	// shedFloor is the lowest the limit goes. A limit on misses in
	// flight bounds their CPU only through the backend's latency: at the
	// millisecond a denial takes on a node, 32 misses in flight still
	// pass some 30,000 a second, more than a flood sends: in runs of
	// compare's flood with its generator in real time, the queue stood at
	// a floor of 32 (docs/studies/2026-12-02-flood-shedding.md). 8 still gives each of eight
	// clients with misses in flight a share of one past it
	// (Server.acquire).
	shedFloor = 8
	// shedMinStarted is the misses per P a window must start for a
	// standing queue to be blamed on misses: 16 in 25ms, 640 a second,
	// a fifth of a core or more at the frontend's and backend's cost.
	shedMinStarted = 16
	// shedSustain is how long the queue must stand before the limit
	// drops (CoDel's interval).
	shedSustain = 100 * time.Millisecond
	// shedArmAfter is how long after the start the limit stays put
	// (Config.shedArmAfter's default): the backlog and cold cache of a
	// restart take about a second.
	shedArmAfter = 5 * time.Second
)

// delayWindow is one reader's current window. Only its reader uses it.
type delayWindow struct {
	end      int64 // unix ns at which the window ends
	minDelay int64 // smallest head delay of the window so far
}

// observeDelay records the head delay (ns) of a batch that a reader with
// window w read at now (unix ns), and moves the limit on misses in
// flight when the window closes.
func (s *Server) observeDelay(w *delayWindow, now, delay int64) {
	if now < w.end {
		w.minDelay = min(w.minDelay, delay)
		return
	}
	if w.end == 0 { // the reader's first batch
		w.end, w.minDelay = now+shedWindow.Nanoseconds(), delay
		return
	}
	target := s.cfg.ShedDelay.Nanoseconds()
	minDelay := w.minDelay
	// No batch for a whole window: either nothing came (the queue was
	// empty, and this batch's head did not wait) or the reader itself
	// waited for a CPU that long (this batch's head did).
	idle := false
	if now-w.end >= shedWindow.Nanoseconds() {
		idle = delay < target/2
		minDelay = min(minDelay, delay)
	}
	w.end, w.minDelay = now+shedWindow.Nanoseconds(), delay
	if !idle && minDelay > target {
		s.standingAt.Store(now)
	}
	next := s.shedNext.Load()
	if now < next || !s.shedNext.CompareAndSwap(next, now+shedWindow.Nanoseconds()) {
		return // another reader moved the limit in this window
	}
	started := s.missesStarted.Load()
	busy := started-s.shedStarted.Swap(started) >= int64(shedMinStarted*runtime.GOMAXPROCS(0))
	stood := now-s.standingAt.Load() <= 2*shedWindow.Nanoseconds()
	standing := stood && busy
	since := s.standingSince.Load()
	switch {
	case !standing:
		s.standingSince.Store(0)
	case since == 0:
		s.standingSince.Store(now)
		since = now
	}
	sustained := standing && now-since >= shedSustain.Nanoseconds() &&
		now-s.readStart >= s.cfg.shedArmAfter.Nanoseconds()
	short := !stood && (idle || minDelay < target/2)
	s.missLimit.Store(nextLimit(s.missLimit.Load(), s.inflight.Load(), int64(s.cfg.MaxInflight), short, sustained))
}

// nextLimit is the limit on misses in flight after a window, with
// inflight misses in flight now and the configured most: short, no
// socket's queue stood in it (every batch the mover read waited under
// half the target, or none came); standing, the queue has stood for
// shedSustain while misses started fast, so misses are its cause.
func nextLimit(limit, inflight, most int64, short, standing bool) int64 {
	switch {
	case short:
		return min(most, limit+max(limit/8, shedFloor/2))
	case standing:
		return max(shedFloor, min(limit, inflight)*3/4)
	}
	return limit
}

// sizeofTimespec is the size of the SCM_TIMESTAMPNS payload.
const sizeofTimespec = int(unsafe.Sizeof(unix.Timespec{}))

// stampCtrlLen is the control buffer of the one message per batch whose
// arrival stamp is read: one cmsg holding a timespec.
var stampCtrlLen = unix.CmsgSpace(sizeofTimespec)

// maxStampAge bounds a plausible queue delay: a stamp older than this
// (a step of the wall clock, a socket that was adopted with datagrams
// queued for a long time) is not counted.
const maxStampAge = int64(10 * time.Second)

// arrival returns the kernel's arrival stamp (unix ns) from the control
// data ctrl of one received message, or 0 when it carries none.
func arrival(ctrl []byte) int64 {
	if len(ctrl) < unix.CmsgLen(sizeofTimespec) {
		return 0
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
	if h.Level != unix.SOL_SOCKET || h.Type != unix.SCM_TIMESTAMPNS ||
		int(h.Len) < unix.CmsgLen(sizeofTimespec) {
		return 0
	}
	ts := (*unix.Timespec)(unsafe.Pointer(&ctrl[unix.CmsgLen(0)]))
	return ts.Nano()
}

// queueDelay is how long a datagram stamped at (unix ns) had waited at
// now, or -1 when the stamp is missing or implausible.
func queueDelay(now, at int64) int64 {
	if at == 0 {
		return -1
	}
	d := now - at
	if d < 0 {
		return 0 // clocks of different CPUs, read a few ns apart
	}
	if d > maxStampAge {
		return -1
	}
	return d
}
