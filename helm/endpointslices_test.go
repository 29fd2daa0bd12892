package helm

import (
	"slices"
	"strings"
	"testing"
)

// TestEndpointSlicesValue checks backend.endpointSlices: the backend's
// environment carries it into the Corefile's nodedns_kubernetes stanza,
// spec by default, and anything but spec or all fails the render (the
// schema).
func TestEndpointSlicesValue(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   string // NODEDNS_ENDPOINTSLICES; "" when the render must fail
	}{
		{"", "spec"},
		{"backend: {endpointSlices: spec}", "spec"},
		{"backend: {endpointSlices: all}", "all"},
		{"backend: {endpointSlices: headless}", ""},
	} {
		t.Run(tc.values, func(t *testing.T) {
			vals, err := ParseValues(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Render(vals, onEmptyCluster())
			if tc.want == "" {
				// values.schema.json names the key and the values allowed.
				if err == nil || !strings.Contains(err.Error(), `at '/backend/endpointSlices': value must be one of 'spec', 'all'`) {
					t.Fatalf("render error %v, want one naming backend.endpointSlices", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			objs, err := r.Objects()
			if err != nil {
				t.Fatal(err)
			}
			corefile := ConfigMaps(objs)["nodedns-backend"].Data["Corefile"]
			lines := corefileLines(corefile)
			i := slices.Index(lines, "nodedns_kubernetes {$NODEDNS_CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {")
			if i < 0 || i+1 >= len(lines) || lines[i+1] != "endpointslices {$NODEDNS_ENDPOINTSLICES}" {
				t.Fatalf("no nodedns_kubernetes stanza opening with endpointslices {$NODEDNS_ENDPOINTSLICES}:\n%s", corefile)
			}
			cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "n", IP: "192.0.2.1"})
			if err != nil {
				t.Fatal(err)
			}
			if cs[0].Spec.Name != "backend" {
				t.Fatalf("first container is %s", cs[0].Spec.Name)
			}
			if !slices.Contains(cs[0].Env, "NODEDNS_ENDPOINTSLICES="+tc.want) {
				t.Errorf("backend environment %q lacks NODEDNS_ENDPOINTSLICES=%s", cs[0].Env, tc.want)
			}
		})
	}
}
