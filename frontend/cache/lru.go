package cache

// list is an intrusive circular doubly linked list of entries with a
// sentinel; it allocates nothing per operation.
type list struct {
	root Entry
	len  int
}

func (l *list) init() { l.root.prev, l.root.next = &l.root, &l.root }

func (l *list) pushFront(e *Entry) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
	l.len++
}

func (l *list) remove(e *Entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	l.len--
}

// back returns the least recently used entry, or nil.
func (l *list) back() *Entry {
	if l.len == 0 {
		return nil
	}
	return l.root.prev
}

// Segments of an slru.
const (
	probation uint8 = iota
	protected
)

// slru is a segmented LRU: entries enter the probation segment and move to
// the protected segment on their first hit; protected entries pushed out
// fall back to probation, and only probation entries are evicted (unless
// probation is empty). Guarded by the owning shard's mutex.
type slru struct {
	prob, prot list
	cap        int // entries in both segments
	protCap    int // entries in the protected segment
}

func (s *slru) init(capacity int) {
	s.prob.init()
	s.prot.init()
	s.cap = capacity
	// 80% protected, as in the SLRU of W-TinyLFU; probation keeps at
	// least one slot so that new entries can be admitted at all.
	s.protCap = capacity - max(1, capacity/5)
}

func (s *slru) len() int { return s.prob.len + s.prot.len }

// add inserts e on probation, or in seg when e replaces an entry that was
// there.
func (s *slru) add(e *Entry, seg uint8) {
	e.seg = seg
	if seg == protected {
		s.prot.pushFront(e)
	} else {
		s.prob.pushFront(e)
	}
}

// victim returns the entry to evict: the least recently used one on
// probation, else in the protected segment; never keep, and nil when keep
// is the only entry.
func (s *slru) victim(keep *Entry) *Entry {
	for _, l := range []*list{&s.prob, &s.prot} {
		if v := l.back(); v != nil && v != keep {
			return v
		}
		if l.len > 1 {
			return l.root.prev.prev
		}
	}
	return nil
}

func (s *slru) remove(e *Entry) {
	if e.seg == protected {
		s.prot.remove(e)
	} else {
		s.prob.remove(e)
	}
}

// hit records a use of e: promotion from probation, or a move to the front.
func (s *slru) hit(e *Entry) {
	if e.seg == protected {
		if s.prot.root.next != e {
			s.prot.remove(e)
			s.prot.pushFront(e)
		}
		return
	}
	s.prob.remove(e)
	if s.protCap < 1 {
		s.prob.pushFront(e)
		return
	}
	e.seg = protected
	s.prot.pushFront(e)
	if s.prot.len > s.protCap {
		d := s.prot.back()
		s.prot.remove(d)
		d.seg = probation
		s.prob.pushFront(d)
	}
}
