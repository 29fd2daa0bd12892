package kubespec

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// fakeAPI serves lists and watches of fixed objects, as JSON: a list
// answers with every object; a watch sends them (a streamed list asks
// for them with sendInitialEvents), then the bookmark that ends the
// initial events, then stays open.
func fakeAPI(t *testing.T, objects map[string][]map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var items []map[string]any
		kind := ""
		for suffix, objs := range objects {
			if strings.HasSuffix(r.URL.Path, "/"+suffix) {
				items, kind = objs, suffix
			}
		}
		if kind == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		if q.Get("watch") != "true" && q.Get("watch") != "1" {
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "List", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "5"}, "items": items})
			return
		}
		enc := json.NewEncoder(w)
		if q.Get("sendInitialEvents") == "true" {
			for _, o := range items {
				_ = enc.Encode(map[string]any{"type": "ADDED", "object": o})
			}
			mark := map[string]any{"kind": items[0]["kind"], "apiVersion": items[0]["apiVersion"], "metadata": map[string]any{
				"resourceVersion": "5", "annotations": map[string]any{"k8s.io/initial-events-end": "true"}}}
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": mark})
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAPIClient runs a Controller over the two REST clients against a
// fake API server: what it decodes reaches the stores.
func TestAPIClient(t *testing.T) {
	meta := func(ns, name string, labels map[string]any) map[string]any {
		return map[string]any{"namespace": ns, "name": name, "resourceVersion": "3", "labels": labels}
	}
	srv := fakeAPI(t, map[string][]map[string]any{
		"services": {{"kind": "Service", "apiVersion": "v1", "metadata": meta("a", "web", nil),
			"spec": map[string]any{"clusterIP": "10.0.0.7", "clusterIPs": []string{"10.0.0.7"}, "type": "ClusterIP",
				"ports": []map[string]any{{"name": "http", "port": 80, "protocol": "TCP"}}}}},
		"endpointslices": {{"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
			"metadata":    meta("a", "web-x", map[string]any{"kubernetes.io/service-name": "web", "service.kubernetes.io/headless": ""}),
			"addressType": "IPv4", "endpoints": []map[string]any{{"addresses": []string{"10.1.0.1"}, "conditions": map[string]any{"ready": true}}}}},
		"namespaces": {{"kind": "Namespace", "apiVersion": "v1", "metadata": meta("", "a", nil)}},
	})
	client, err := newAPIClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c, err := newController(client, controllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run()
	// The informers' goroutines read klog's logger, which the kubernetes
	// plugin's setup (TestSetup) replaces without synchronisation: this
	// file sorts after setup_test.go so that TestSetup runs first (with
	// -count above 1 the race detector flags the next TestSetup), and the
	// informers are gone before the next test.
	defer func() {
		_ = c.Stop()
		srv.Close()
		buf := make([]byte, 1<<20)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			stacks := string(buf[:runtime.Stack(buf, true)])
			if !strings.Contains(stacks, "StreamWatcher).receive") && !strings.Contains(stacks, "client-go/tools/cache.") {
				return
			}
		}
		t.Error("informers still running 10s after Stop")
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !c.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("not synced after 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.SvcIndexReverse("10.0.0.7"); len(got) != 1 || got[0].Name != "web" {
		t.Errorf("Service of 10.0.0.7: %v", got)
	}
	// The fake ignores label selectors: both slice watches hold it.
	if got := c.EpIndexReverse("10.1.0.1"); len(got) == 0 || got[0].Index != "web.a" {
		t.Errorf("endpoints of 10.1.0.1: %d", len(got))
	}
	if _, err := c.GetNamespaceByName("a"); err != nil {
		t.Error(err)
	}
}
