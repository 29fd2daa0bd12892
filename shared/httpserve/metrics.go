package httpserve

// Counter is what a Server counts with. *metrics.Counter of
// github.com/VictoriaMetrics/metrics is one; this package does not import
// a metrics library (shared/metrics imports this package for its Handler).
type Counter interface{ Inc() }

// Limit is the bound a new connection met: its peer's share or the
// listener's total.
type Limit int

const (
	// PeerLimit is maxConnsPerPeer connections from the new one's address.
	PeerLimit Limit = iota
	// ListenerLimit is maxConns connections on the listener.
	ListenerLimit
	// NumLimits is the number of Limit values, for arrays indexed by them.
	NumLimits
)

// String returns the limit's label value: "peer" or "listener".
func (l Limit) String() string {
	if l == PeerLimit {
		return "peer"
	}
	return "listener"
}

// Metrics are the counters a Server increments, by the limit that was
// reached; a nil Counter counts nothing. The zero value counts nothing.
type Metrics struct {
	// Evicted counts connections closed to make room for a new one: a
	// lingering or pending connection (makeRoom).
	Evicted [NumLimits]Counter
	// Refused counts new connections closed at once because every slot
	// they could take was serving a request.
	Refused [NumLimits]Counter
}

func (m *Metrics) evicted(l Limit) {
	if c := m.Evicted[l]; c != nil {
		c.Inc()
	}
}

func (m *Metrics) refused(l Limit) {
	if c := m.Refused[l]; c != nil {
		c.Inc()
	}
}
