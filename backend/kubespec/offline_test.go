package kubespec

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// offlineController is a Controller with its stores and no informers.
func offlineController() *Controller {
	c := &Controller{now: func() time.Time { return time.Unix(1700000000, 0) }, stop: make(chan struct{})}
	c.svcs = newStore(map[string]func(*object.Service) []string{svcIPIndex: serviceIPs, svcExtIPIndex: serviceExternalIPs})
	for range 2 {
		c.slices = append(c.slices, newStore(map[string]func(*object.Endpoints) []string{epKeyIndex: endpointsKey, epIPIndex: endpointsIPs}))
	}
	c.nss = newStore[*object.Namespace](nil)
	c.pods = newStore(map[string]func(*object.Pod) []string{podIPIndex: podIPs})
	return c
}

func TestSnapshotRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a := offlineController()
	for _, o := range []*object.Service{svc("a", "web", "1", "10.0.0.1", "fd00::1"), svc("b", "db", "2", "10.0.0.2")} {
		if err := a.svcs.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	e := &object.Endpoints{Name: "db-x", Namespace: "b", Index: object.EndpointsKey("db", "b"), IndexIP: []string{"10.2.0.1"},
		Subsets: []object.EndpointSubset{{Addresses: []object.EndpointAddress{{IP: "10.2.0.1", Hostname: "db-0"}}}}}
	if err := a.slices[0].Add(e); err != nil {
		t.Fatal(err)
	}
	if err := a.nss.Add(&object.Namespace{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := a.writeSnapshot(dir); err != nil {
		t.Fatal(err)
	}
	s, err := readSnapshot(dir)
	if err != nil || s == nil {
		t.Fatalf("readSnapshot: %v, %v", s, err)
	}
	b := offlineController()
	if err := b.load(s); err != nil {
		t.Fatal(err)
	}
	if got := b.SvcIndex("web.a"); len(got) != 1 || strings.Join(got[0].ClusterIPs, ",") != "10.0.0.1,fd00::1" {
		t.Errorf("SvcIndex(web.a) after load: %v", got)
	}
	if got := b.SvcIndexReverse("10.0.0.2"); len(got) != 1 || got[0].Name != "db" {
		t.Errorf("SvcIndexReverse(10.0.0.2) after load: %v", got)
	}
	if got := b.EpIndex(object.EndpointsKey("db", "b")); len(got) != 1 || got[0].Subsets[0].Addresses[0].Hostname != "db-0" {
		t.Errorf("EpIndex(db.b) after load: %v", got)
	}
	if _, err := b.GetNamespaceByName("b"); err != nil {
		t.Errorf("namespace after load: %v", err)
	}
	if b.Modified(0) == 0 {
		t.Errorf("load left the SOA serial at 0")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, SnapshotFile+".*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestSnapshotIgnored: a file that is not a whole snapshot of this
// format is an error (logged and ignored by the caller), a missing one is
// none.
func TestSnapshotIgnored(t *testing.T) {
	dir := t.TempDir()
	if s, err := readSnapshot(dir); s != nil || err != nil {
		t.Fatalf("no file: %v, %v; want nil, nil", s, err)
	}
	for name, content := range map[string]string{
		"truncated":     `{"version":1,"services":[{"Name":"web"`,
		"other version": `{"version":2,"services":[]}`,
		"no version":    `{"services":[]}`,
		"unknown field": `{"version":1,"nodes":[]}`,
		"not JSON":      "\x00\x01garbage",
	} {
		if err := os.WriteFile(filepath.Join(dir, SnapshotFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if s, err := readSnapshot(dir); err == nil {
			t.Errorf("%s: read %+v, want an error", name, s)
		}
	}
	// A snapshot of another slice layout is refused as a whole.
	c := offlineController()
	if err := c.load(&snapshot{Version: snapshotVersion, Slices: make([][]*object.Endpoints, 1)}); err == nil {
		t.Errorf("load of 1 slice store into 2: no error")
	}
	if err := c.load(&snapshot{Version: snapshotVersion, Slices: make([][]*object.Endpoints, 2), Services: []*object.Service{nil}}); err == nil {
		t.Errorf("load of a null Service: no error")
	}
	// Nothing of a refused snapshot is stored.
	if err := c.load(&snapshot{Version: snapshotVersion, Slices: make([][]*object.Endpoints, 2),
		Services: []*object.Service{svc("a", "web", "1", "10.0.0.1")}, Namespaces: []*object.Namespace{{}}}); err == nil {
		t.Errorf("load of a Namespace without a name: no error")
	}
	if got := c.ServiceList(); len(got) != 0 {
		t.Errorf("a refused snapshot left %d Services in the store", len(got))
	}
}

func TestReach(t *testing.T) {
	var r reach
	t0 := time.Unix(1700000000, 0)
	if r.unreachable(t0, time.Second) {
		t.Fatal("unreachable before any request")
	}
	r.result(os.ErrDeadlineExceeded, t0)
	r.result(os.ErrDeadlineExceeded, t0.Add(500*time.Millisecond))
	if r.unreachable(t0.Add(900*time.Millisecond), time.Second) {
		t.Error("unreachable 0.9s after the first failure, want after 1s")
	}
	if !r.unreachable(t0.Add(time.Second), time.Second) {
		t.Error("reachable 1s after the first failure with no success")
	}
	r.result(nil, t0.Add(2*time.Second))
	if r.unreachable(t0.Add(10*time.Second), time.Second) {
		t.Error("unreachable after a success")
	}
}

// TestReachRefused: requests turned away in a row (nothing listens at
// the API server's address, or a relay in front of it accepts and closes
// each connection) make it unreachable after refusedAfter, not
// unreachableAfter; another failure between them, or a success, does not.
// The errors are real ones: a dial of a closed port, and an HTTPS GET (as
// client-go sends) to a listener that closes what it accepts, as the
// testbed's relay to a stopped kube-apiserver does.
func TestReachRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = net.Dial("tcp", addr)
	if err == nil {
		t.Fatalf("a dial of the closed %s succeeded", addr)
	}
	refusedErr := &url.Error{Op: "Get", URL: "https://" + addr + "/version", Err: err}

	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	go func() {
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // the ClientHello arrives unread
			c.Close()
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	_, closedErr := client.Get("https://" + closer.Addr().String() + "/version")
	if closedErr == nil {
		t.Fatal("a GET through a closing listener succeeded")
	}
	_, timeoutErr := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", closer.Addr().String())

	t.Logf("turned away: %v; %v; timed out: %v", refusedErr, closedErr, timeoutErr)
	for _, turned := range []error{refusedErr, closedErr} {
		if !refused(turned) {
			t.Errorf("%v: not seen as turned away", turned)
		}
	}
	if timeoutErr != nil && refused(timeoutErr) {
		t.Errorf("%v: a timeout seen as turned away", timeoutErr)
	}
	t0 := time.Unix(1700000000, 0)
	var r reach
	for i := range refusedRuns {
		if r.unreachable(t0.Add(refusedAfter), unreachableAfter) {
			t.Fatalf("unreachable after %d refusals, want %d", i, refusedRuns)
		}
		r.result([]error{refusedErr, closedErr}[i%2], t0.Add(time.Duration(i)*time.Millisecond))
	}
	if r.unreachable(t0.Add(refusedAfter-time.Millisecond), unreachableAfter) {
		t.Errorf("unreachable before refusedAfter (%v)", refusedAfter)
	}
	if !r.unreachable(t0.Add(refusedAfter), unreachableAfter) {
		t.Errorf("reachable %v after %d requests turned away in a row (%v; %v)", refusedAfter, refusedRuns, refusedErr, closedErr)
	}
	r.result(os.ErrDeadlineExceeded, t0.Add(50*time.Millisecond))
	if r.unreachable(t0.Add(time.Second), unreachableAfter) {
		t.Error("unreachable 1s after the first failure with a timeout after the refusals, want after unreachableAfter")
	}
	for i := range refusedRuns {
		r.result(refusedErr, t0.Add(time.Duration(60+i)*time.Millisecond))
	}
	r.result(nil, t0.Add(100*time.Millisecond))
	r.result(refusedErr, t0.Add(110*time.Millisecond))
	if r.unreachable(t0.Add(time.Second), unreachableAfter) {
		t.Error("unreachable after a success and one refusal")
	}
}

// unsynced is an informer that never lists.
type unsynced struct{ cache.Controller }

func (unsynced) HasSynced() bool { return false }

// TestHasSyncedOffline: an unsynced controller is "synced" for the
// plugin's start-up wait once startOffline found the API server
// unreachable and no other backend serving, not after
// the servers started (the plugin then answers SERVFAIL for what it does
// not know, and /ready says 503), and while it serves a snapshot.
func TestHasSyncedOffline(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := offlineController()
	c.now = func() time.Time { return now }
	c.informers = []cache.Controller{unsynced{}}
	if c.HasSynced() {
		t.Fatal("synced before any request")
	}
	c.reach.result(os.ErrDeadlineExceeded, now.Add(-unreachableAfter/2))
	if c.HasSynced() {
		t.Errorf("synced %v after the first failure, want after %v", unreachableAfter/2, unreachableAfter)
	}
	now = now.Add(unreachableAfter)
	if c.HasSynced() {
		t.Errorf("synced before startOffline decided")
	}
	c.openEarly.Store(true) // startOffline: unreachable, no other backend
	if !c.HasSynced() {
		t.Errorf("start-up still waits once the ports may open early")
	}
	c.Started()
	if c.HasSynced() {
		t.Errorf("synced after the start with neither watches nor snapshot")
	}
	c.offline.Store(true)
	if !c.HasSynced() {
		t.Errorf("not synced while serving the snapshot")
	}
}

// TestPeerServing: a surge's old backend on the DNS address keeps a
// starting backend waiting; an unused address does not.
func TestPeerServing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := offlineController()
	c.dnsAddr = l.Addr().String()
	if !c.peerServing() {
		t.Errorf("a listener on %s is not seen", c.dnsAddr)
	}
	l.Close()
	if c.peerServing() {
		t.Errorf("%s closed, still seen serving", c.dnsAddr)
	}
	c.dnsAddr = ""
	if c.peerServing() {
		t.Errorf("no address: seen serving")
	}
}

// TestProbeTurnedAway: the probe, through the controller's real client,
// of an address whose connections are reset (the testbed's relay to a
// stopped kube-apiserver, a TCP load balancer with no backend) fails at
// once and counts as turned away: client-go would retry a reset GET up
// to 10 times, a second apart, past the probe's bound.
func TestProbeTurnedAway(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // the ClientHello arrives unread
			c.Close()
		}
	}()
	client, err := newAPIClient(&rest.Config{Host: "https://" + l.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	c := offlineController()
	c.client = client
	c.now = time.Now
	start := time.Now()
	err = c.probe()
	took := time.Since(start)
	t.Logf("probe: %v after %v", err, took.Round(time.Millisecond))
	if err == nil || !refused(err) {
		t.Errorf("probe error %v: not turned away", err)
	}
	if took > probeTimeout/2 {
		t.Errorf("probe failed after %v, want at once (the bound is %v)", took, probeTimeout)
	}
	if c.reach.refused.Load() != 1 {
		t.Errorf("%d turned away recorded, want 1", c.reach.refused.Load())
	}
}
