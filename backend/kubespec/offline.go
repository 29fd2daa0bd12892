package kubespec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodedns/nodedns/backend/internal/atomicfile"
)

// What a backend does with no API server (docs/fail-open.md):
//
//   - Running, it keeps its stores: a failed watch leaves them as they
//     are, the informers list again once the API server answers.
//   - Starting, the kubernetes plugin holds the DNS ports closed until the
//     watches sync or startup_timeout passes. A backend whose requests to
//     the API server (its watches' and a probe's) have all failed for
//     unreachableAfter opens them at once instead, or after refusedAfter
//     when refusedRuns of them in a row were refused or closed before an
//     answer (nothing serves at the API server's address): external
//     names are answered, and cluster names from
//     the snapshot, if there is one, else SERVFAIL (the plugin's answer
//     while unsynced) until the watches sync.
//
// The snapshot is the stores' contents as of their last change, written
// to SnapshotFile in the snapshot directory every snapshotInterval once
// the watches have synced, and read at start only when the API server
// cannot be reached. The plugin serves it as synced (NXDOMAIN for names
// it does not hold) until the watches sync, whose first list replaces it.

var log = clog.NewWithPlugin(Name)

// SnapshotFile is the snapshot's name in the snapshot directory.
const SnapshotFile = "kubernetes-snapshot.json"

const (
	// unreachableAfter is how long every request to the API server must
	// have failed before a starting backend stops waiting for it: longer
	// than the reflector's first retry, so that one failed request of a
	// reachable API server does not open the ports unsynced.
	unreachableAfter = 2 * time.Second
	// refusedRuns requests in a row whose connection was refused, reset
	// or closed before an answer, over at least refusedAfter, are an API
	// server that is not running: nothing listens at its address (a
	// kube-apiserver stopped or restarting), or a TCP load balancer or
	// relay in front of it accepts and closes each connection for want of
	// one (the testbed's relay does that). A reachable API server turns
	// no connection away, so a starting backend need not wait
	// unreachableAfter for it; the ports that wait keeps closed are, in
	// link-local mode, an endpoint of kube-dns that no API server can
	// remove meanwhile (docs/apiserver-outage.md).
	refusedRuns  = 3
	refusedAfter = 200 * time.Millisecond
	// probeTimeout bounds a starting backend's probe of the API server,
	// sent every probeInterval until the watches sync or the servers
	// start (at most startup_timeout).
	probeTimeout  = 2 * time.Second
	probeInterval = 500 * time.Millisecond
	// refusedProbeInterval follows a probe turned away: it cost the API
	// server nothing.
	refusedProbeInterval = 100 * time.Millisecond
	// snapshotInterval is how often a changed store is written.
	snapshotInterval = 30 * time.Second
	// maxSnapshotBytes bounds the snapshot file, read and written: a
	// store larger than this (some 100,000 Services and slices) is not
	// written, a larger file is not read.
	maxSnapshotBytes = 64 << 20
	// snapshotVersion is the format's version; another is not read.
	snapshotVersion = 1
)

// reach records whether the API server answers the watches' requests.
type reach struct {
	failedSince atomic.Int64 // Unix nanoseconds of the first failure since the last success; 0: none
	refused     atomic.Int32 // requests in a row turned away (refused), since any other outcome
	last        atomic.Value // the last failure's error, for the log
}

// result records the outcome of one list or watch request, or probe.
func (r *reach) result(err error, now time.Time) {
	if err == nil {
		r.failedSince.Store(0)
		r.refused.Store(0)
		return
	}
	r.last.Store(err.Error())
	if refused(err) {
		r.refused.Add(1)
	} else {
		r.refused.Store(0)
	}
	r.failedSince.CompareAndSwap(0, now.UnixNano())
}

// refused reports whether err is a connection refused, reset or closed
// before any answer: turned away at once, not timed out.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unreachable reports whether every request for at least d has failed,
// or for at least refusedAfter with the last refusedRuns turned away.
func (r *reach) unreachable(now time.Time, d time.Duration) bool {
	f := r.failedSince.Load()
	if f == 0 {
		return false
	}
	since := now.Sub(time.Unix(0, f))
	return since >= d || since >= refusedAfter && r.refused.Load() >= refusedRuns
}

// snapshot is the file's content.
type snapshot struct {
	Version    int                   `json:"version"`
	Written    time.Time             `json:"written"`
	Services   []*object.Service     `json:"services"`
	Slices     [][]*object.Endpoints `json:"slices"` // one list per slice store, in Controller.slices' order
	Namespaces []*object.Namespace   `json:"namespaces"`
	Pods       []*object.Pod         `json:"pods"`
}

// take copies the stores. Their objects are immutable once stored.
func (c *Controller) take() *snapshot {
	s := &snapshot{Version: snapshotVersion, Written: c.now().UTC(), Services: c.svcs.list(), Namespaces: c.nss.list(), Pods: c.pods.list()}
	for _, st := range c.slices {
		s.Slices = append(s.Slices, st.list())
	}
	return s
}

// writeSnapshot writes the stores to dir atomically: a temporary file in
// dir, synced, renamed over the last one.
func (c *Controller) writeSnapshot(dir string) error {
	b, err := json.Marshal(c.take())
	if err != nil {
		return err
	}
	return atomicfile.Write(dir, SnapshotFile, b, maxSnapshotBytes)
}

// readSnapshot reads dir's snapshot; a missing file is (nil, nil).
func readSnapshot(dir string) (*snapshot, error) {
	f, err := os.Open(filepath.Join(dir, SnapshotFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSnapshotBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSnapshotBytes {
		return nil, fmt.Errorf("larger than the limit of %d bytes", maxSnapshotBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	s := &snapshot{}
	if err := d.Decode(s); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	if s.Version != snapshotVersion {
		return nil, fmt.Errorf("version %d, want %d", s.Version, snapshotVersion)
	}
	return s, nil
}

// load puts s into the stores; s's slice stores must match c's. A
// snapshot with an object that has no name is refused before anything
// is stored.
func (c *Controller) load(s *snapshot) error {
	if len(s.Slices) != len(c.slices) {
		return fmt.Errorf("%d slice stores, want %d", len(s.Slices), len(c.slices))
	}
	type entry struct {
		st  interface{ Add(any) error }
		obj any
	}
	var all []entry
	var errs []error
	check := func(st interface{ Add(any) error }, obj any, null bool, name string) {
		if null || name == "" {
			errs = append(errs, errors.New("an object without a name"))
			return
		}
		all = append(all, entry{st, obj})
	}
	for _, o := range s.Services {
		check(c.svcs, o, o == nil, nameOf(o == nil, func() string { return o.Name }))
	}
	for i, l := range s.Slices {
		for _, o := range l {
			check(c.slices[i], o, o == nil, nameOf(o == nil, func() string { return o.Name }))
		}
	}
	for _, o := range s.Namespaces {
		check(c.nss, o, o == nil, nameOf(o == nil, func() string { return o.Name }))
	}
	for _, o := range s.Pods {
		check(c.pods, o, o == nil, nameOf(o == nil, func() string { return o.Name }))
	}
	if len(errs) > 0 {
		return fmt.Errorf("corrupt: %w", errors.Join(errs...))
	}
	for _, e := range all {
		if err := e.st.Add(e.obj); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("corrupt: %w", errors.Join(errs...))
	}
	now := c.now().Unix()
	c.modified.Store(now)
	c.extModified.Store(now)
	return nil
}

// probe asks the API server for /version within probeTimeout and records
// the outcome as of the request's start: an API server that accepts
// connections and never answers (a black hole, a stopped process) fails
// no watch request until the client's TLS handshake timeout (10 s), so
// the probe's bound is what finds it. An answer of any status is a
// reachable API server.
func (c *Controller) probe() error {
	start := c.now()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	// No retry within the probe: client-go retries a GET whose
	// connection was reset (up to 10 times, a second apart), which hides
	// what the probe is for until its deadline.
	err := c.client.core.Get().AbsPath("/version").MaxRetries(0).Do(ctx).Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		err = nil
	}
	c.reach.result(err, start)
	return err
}

// peerServing reports whether another process answers on the server
// block's DNS address: the old backend of a surge rollout, which shares
// the port (SO_REUSEPORT). This process binds it only after the start-up
// wait, so whatever accepts the connection is another.
func (c *Controller) peerServing() bool {
	if c.dnsAddr == "" {
		return false
	}
	conn, err := net.DialTimeout("tcp", c.dnsAddr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func nameOf(null bool, name func() string) string {
	if null {
		return ""
	}
	return name()
}

// startOffline waits, from Run, until the watches sync or the API server
// is unreachable with no other backend serving the DNS address; then it
// opens the ports (openEarly) and serves the snapshot, if there is one,
// until the watches sync. While another backend serves, a surge's new
// backend waits as before: it would take a share of the queries it
// cannot answer.
func (c *Controller) startOffline() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	probed := make(chan struct{}, 1)
	probed <- struct{}{}
	peerLogged := false
	var down time.Duration // how long every request had failed
	var why string
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.informersSynced() {
			return
		}
		if now := c.now(); c.reach.unreachable(now, unreachableAfter) {
			if f := c.reach.failedSince.Load(); f != 0 {
				down = now.Sub(time.Unix(0, f)).Round(10 * time.Millisecond)
			}
			why = fmt.Sprintf("every request failed, the last with: %v", c.reach.last.Load())
			if c.reach.refused.Load() >= refusedRuns {
				why = fmt.Sprintf("%d requests in a row turned away: %v", c.reach.refused.Load(), c.reach.last.Load())
			}
			if !c.peerServing() {
				break
			}
			if !peerLogged {
				log.Infof("no API server, and another backend answers on %s: waiting for the watches (startup_timeout)", c.dnsAddr)
				peerLogged = true
			}
		}
		if c.started.Load() {
			// The ports are open: only the watches' own requests
			// count, no probe adds to the API server's load.
			continue
		}
		select {
		case <-probed: // one probe at a time
			go func() {
				wait := probeInterval
				if err := c.probe(); err != nil && refused(err) {
					wait = refusedProbeInterval
				}
				time.Sleep(wait)
				probed <- struct{}{}
			}()
		default:
		}
	}
	// The ports open once the snapshot is in the stores, or is not.
	defer c.openEarly.Store(true)
	if c.snapshotDir == "" {
		log.Warningf("no API server for %v (%s): answering without the cluster's names (SERVFAIL) until the watches sync; no snapshot directory is set", down, why)
		return
	}
	s, err := readSnapshot(c.snapshotDir)
	switch {
	case err != nil:
		log.Warningf("no API server for %v (%s); snapshot %s ignored: %v; answering without the cluster's names (SERVFAIL) until the watches sync", down, why, filepath.Join(c.snapshotDir, SnapshotFile), err)
		return
	case s == nil:
		log.Warningf("no API server for %v (%s) and no snapshot in %s: answering without the cluster's names (SERVFAIL) until the watches sync", down, why, c.snapshotDir)
		return
	}
	if c.informersSynced() {
		return
	}
	if err := c.load(s); err != nil {
		// Partly loaded: the watches' first list replaces it.
		log.Warningf("snapshot %s ignored: %v; answering without the cluster's names (SERVFAIL) until the watches sync", filepath.Join(c.snapshotDir, SnapshotFile), err)
		return
	}
	c.offline.Store(true)
	c.openEarly.Store(true)
	var eps int
	for _, l := range s.Slices {
		eps += len(l)
	}
	log.Warningf("no API server for %v (%s): serving the snapshot of %s (%d Services, %d EndpointSlices, %d Namespaces) until the watches sync",
		down, why, s.Written.Format(time.RFC3339), len(s.Services), eps, len(s.Namespaces))
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.informersSynced() {
			c.offline.Store(false)
			log.Infof("watches synced: the snapshot is replaced")
			return
		}
	}
}

// writeSnapshots writes the stores once the watches have synced, then
// every snapshotInterval while they are synced and something changed.
func (c *Controller) writeSnapshots() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var written uint64
	var at time.Time // of the last write; zero: none yet
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		g := c.changes.Load()
		if !c.informersSynced() || (!at.IsZero() && (g == written || time.Since(at) < snapshotInterval)) {
			continue
		}
		if err := c.writeSnapshot(c.snapshotDir); err != nil {
			log.Warningf("snapshot in %s: %v", c.snapshotDir, err)
		}
		// A failed write is tried again after the interval too.
		written, at = g, time.Now()
	}
}
