package kubespec

import (
	"runtime/debug"
	"sync/atomic"
	"time"
)

// releaseQuiet is how long the informers' events must pause after a list
// before its garbage is returned: the end of a list shows as its events
// stopping, whichever way it came (pages, or a streamed list).
const releaseQuiet = 2 * time.Second

// releaser returns the garbage of each list to the OS once the list is
// processed. Decoding a list allocates several times what the store keeps,
// and a relist replaces every object: after the first list or an API
// server restart most of the heap is garbage. The collector would free it
// only when the heap next grows by GOGC percent, which a quiet cluster may
// not do for a long time, or at its forced cycle every two minutes, and
// then give the pages back over minutes more; until then kubelet counts
// them in the container's working set. debug.FreeOSMemory collects and
// returns them at once: one collection per list, tens of milliseconds for
// a heap of tens of MiB.
type releaser struct {
	lists  chan struct{} // a list started; buffered, one pending is enough
	events atomic.Int64  // store changes so far
	quiet  time.Duration
	free   func()        // debug.FreeOSMemory
	ticked chan struct{} // tests: told after each tick is looked at
}

func newReleaser() *releaser {
	return &releaser{lists: make(chan struct{}, 1), quiet: releaseQuiet, free: debug.FreeOSMemory}
}

// listed notes that an informer started a list. A nil releaser (a
// Controller built without one) ignores it, as it does events.
func (r *releaser) listed() {
	if r == nil {
		return
	}
	select {
	case r.lists <- struct{}{}:
	default:
	}
}

// event notes one store change.
func (r *releaser) event() {
	if r != nil {
		r.events.Add(1)
	}
}

// run frees memory after each list once the events have paused for quiet,
// until stop closes.
func (r *releaser) run(stop <-chan struct{}) {
	t := time.NewTicker(r.quiet)
	defer t.Stop()
	r.loop(stop, t.C)
}

// loop is run with its clock: a list is done when a tick finds no change
// since the previous one, after at least one.
func (r *releaser) loop(stop <-chan struct{}, tick <-chan time.Time) {
	for {
		select {
		case <-stop:
			return
		case <-r.lists:
		}
		// A list's events start when its response is in, which for a
		// large list takes seconds: wait for a change, then for a whole
		// period without one. Lists of several informers overlap; a
		// list without objects changes nothing and waits for the next
		// change.
		start := r.events.Load()
		last := start
		for {
			select {
			case <-stop:
				return
			case <-r.lists:
				continue
			case <-tick:
			}
			n := r.events.Load()
			if r.ticked != nil {
				r.ticked <- struct{}{}
			}
			if n != start && n == last {
				break
			}
			last = n
		}
		r.free()
	}
}
