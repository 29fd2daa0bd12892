package kubespec

import (
	"slices"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func svc(ns, name, version string, ips ...string) *object.Service {
	return &object.Service{Name: name, Namespace: ns, Version: version, Index: object.ServiceKey(name, ns), ClusterIPs: ips}
}

func names(svcs []*object.Service) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	slices.Sort(out)
	return out
}

// TestStore checks the compact store's indexes through adds, updates that
// move a Service's addresses, deletes (also by a tombstone) and a replace.
func TestStore(t *testing.T) {
	c := &Controller{svcs: newStore(map[string]func(*object.Service) []string{svcIPIndex: serviceIPs, svcExtIPIndex: serviceExternalIPs})}
	s := c.svcs
	for _, o := range []*object.Service{svc("a", "web", "1", "10.0.0.1", "fd00::1"), svc("b", "web", "1", "10.0.0.2"), svc("a", "db", "1", "10.0.0.3")} {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step, ip string, want ...string) {
		t.Helper()
		if got := names(c.SvcIndexReverse(ip)); !slices.Equal(got, want) {
			t.Errorf("%s: Services of %s: %v, want %v", step, ip, got, want)
		}
	}
	check("added", "fd00::1", "a/web")
	check("added", "10.0.0.2", "b/web")
	if got := names(c.SvcIndex("web.a")); !slices.Equal(got, []string{"a/web"}) {
		t.Errorf("SvcIndex(web.a) = %v", got)
	}
	for _, key := range []string{"web.c", "web", "", "a.web", "x.y.z"} {
		if got := c.SvcIndex(key); len(got) != 0 {
			t.Errorf("SvcIndex(%q) = %v, want none", key, names(got))
		}
	}

	// An update moves a ClusterIP: the old value no longer finds it.
	if err := s.Update(svc("a", "web", "2", "10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	check("updated", "10.0.0.1")
	check("updated", "fd00::1")
	check("updated", "10.0.0.9", "a/web")
	// Two Services holding one address for a moment (a delete and a
	// create seen out of order) are both found, and each leaves alone.
	if err := s.Add(svc("c", "new", "1", "10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	check("shared", "10.0.0.9", "a/web", "c/new")
	if err := s.Delete(cache.DeletedFinalStateUnknown{Key: "a/web"}); err != nil {
		t.Fatal(err)
	}
	check("tombstone", "10.0.0.9", "c/new")
	if err := s.Delete(svc("c", "new", "1", "10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	check("deleted", "10.0.0.9")
	if n := len(s.indexes[svcIPIndex].m); n != 2 {
		t.Errorf("IP index holds %d values, want 2 (10.0.0.2, 10.0.0.3)", n)
	}
	if keys := s.ListKeys(); len(keys) != 2 {
		t.Errorf("keys %v, want 2", keys)
	}

	if err := s.Replace([]any{svc("d", "x", "5", "10.0.0.5")}, "77"); err != nil {
		t.Fatal(err)
	}
	check("replaced", "10.0.0.2")
	check("replaced", "10.0.0.5", "d/x")
	if rv := s.LastStoreSyncResourceVersion(); rv != "77" {
		t.Errorf("resource version %q after Replace, want 77", rv)
	}
	if _, ok, _ := s.GetByKey("d/x"); !ok {
		t.Error("d/x not found by key")
	}
	if got, _ := s.ByIndex(svcIPIndex, "10.0.0.5"); len(got) != 1 {
		t.Errorf("ByIndex: %v", got)
	}
	if _, err := s.ByIndex("bogus", "x"); err == nil {
		t.Error("ByIndex of an unknown index: no error")
	}
	if err := s.Add(&corev1.Service{}); err == nil {
		t.Error("a store of *object.Service took a *v1.Service")
	}
	if err := s.AddIndexers(cache.Indexers{"x": nil}); err == nil {
		t.Error("AddIndexers: no error")
	}
}

// TestStoreEndpoints: slices of one Service are all found by its key.
func TestStoreEndpoints(t *testing.T) {
	st := newStore(map[string]func(*object.Endpoints) []string{epKeyIndex: endpointsKey, epIPIndex: endpointsIPs})
	c := &Controller{slices: []*store[*object.Endpoints]{st}}
	key := object.EndpointsKey("web", "a")
	for i, ip := range []string{"10.1.0.1", "10.1.0.2"} {
		e := &object.Endpoints{Name: "web-" + string(rune('x'+i)), Namespace: "a", Index: key, IndexIP: []string{ip}}
		if err := st.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.EpIndex(key); len(got) != 2 {
		t.Errorf("EpIndex(%s): %d slices, want 2", key, len(got))
	}
	if got := c.EpIndexReverse("10.1.0.2"); len(got) != 1 || got[0].Name != "web-y" {
		t.Errorf("EpIndexReverse(10.1.0.2) = %v", got)
	}
	if got := c.EndpointsList(); len(got) != 2 {
		t.Errorf("EndpointsList: %d, want 2", len(got))
	}
}

// TestReleaser: memory is freed once per list, at the first tick that
// finds no change since the previous one.
func TestReleaser(t *testing.T) {
	r := newReleaser()
	freed := make(chan struct{}, 10)
	r.free = func() { freed <- struct{}{} }
	stop := make(chan struct{})
	defer close(stop)
	tick := make(chan time.Time)
	r.ticked = make(chan struct{})
	go r.loop(stop, tick)
	// send returns once the loop has looked at the tick.
	send := func() {
		t.Helper()
		select {
		case tick <- time.Time{}:
		case <-time.After(5 * time.Second):
			t.Fatal("the loop takes no tick while a list is pending")
		}
		<-r.ticked
	}
	none := func(step string) {
		t.Helper()
		select {
		case <-freed:
			t.Fatalf("%s: freed", step)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// listed waits until the loop took the list.
	listed := func() {
		r.listed()
		for len(r.lists) > 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A list whose response has not come yet: no events, nothing freed.
	listed()
	send()
	send()
	none("a list without events yet")
	// Its events over five ticks, and a second list's: nothing is freed
	// while they go on.
	r.listed()
	for range 5 {
		r.event()
		send()
	}
	none("events between ticks")
	// A quiet tick ends the list; one release for both lists.
	send()
	select {
	case <-freed:
	case <-time.After(5 * time.Second):
		t.Fatal("not freed after a quiet tick")
	}
	// Events without a list (watch changes) free nothing.
	r.event()
	select {
	case tick <- time.Time{}:
		t.Fatal("loop took a tick with no list pending")
	case <-time.After(50 * time.Millisecond):
	}
	none("events without a list")
	// The next list: freed again.
	listed()
	r.event()
	send()
	none("the next list's events")
	send()
	select {
	case <-freed:
	case <-time.After(5 * time.Second):
		t.Fatal("second list: not freed")
	}
}
