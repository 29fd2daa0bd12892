package helm

import (
	"slices"
	"strings"
	"testing"
)

// TestFallbackListenerRestricted checks what keeps the backends' fallback
// listener from being an open resolver and the metrics off other
// addresses: the Corefile binds the fallback block to the node IP and
// restricts it with acl to fallback.allowedNetworks, and both containers'
// metrics listen on the node IP.
func TestFallbackListenerRestricted(t *testing.T) {
	for _, tc := range []struct {
		values string
		allow  string
	}{
		{``, "allow net 127.0.0.0/8 ::1/128 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 fc00::/7"},
		{`fallback: {allowedNetworks: [10.244.0.0/16, 2001:db8::/64]}`, "allow net 127.0.0.0/8 ::1/128 10.244.0.0/16 2001:db8::/64"},
	} {
		_, objs, _ := render(t, tc.values)
		cm := ConfigMaps(objs)["nodedns-backend"]
		if cm == nil {
			t.Fatal("no backend ConfigMap")
		}
		core := cm.Data["Corefile"]
		_, fallback, ok := strings.Cut(core, ".:{$NODEDNS_FALLBACK_PORT} {")
		if !ok {
			t.Fatalf("%q: no fallback block in\n%s", tc.values, core)
		}
		fallback, _, _ = strings.Cut(fallback, "\n    }")
		lines := corefileLines(fallback)
		for _, want := range []string{"bind {$NODEDNS_FALLBACK_BIND}", "acl {", tc.allow, "block"} {
			if !slices.Contains(lines, want) {
				t.Errorf("%q: fallback block lacks %q:\n%s", tc.values, want, fallback)
			}
		}
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NodeContainers(vals, Options{}, Node{Name: "node-a", IP: "192.0.2.7"})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]Container{}
		for _, c := range cs {
			byName[c.Spec.Name] = c
		}
		env := map[string]string{}
		for _, kv := range byName["backend"].Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if env["NODEDNS_FALLBACK_BIND"] != "192.0.2.7" || env["NODEDNS_METRICS"] != "192.0.2.7:9153" {
			t.Errorf("%q: backend NODEDNS_FALLBACK_BIND=%q NODEDNS_METRICS=%q, want the node IP", tc.values, env["NODEDNS_FALLBACK_BIND"], env["NODEDNS_METRICS"])
		}
		if fe := byName["frontend"].Command; !slices.Contains(fe, "--metrics=192.0.2.7:9253") {
			t.Errorf("%q: frontend command %q lacks --metrics on the node IP", tc.values, fe)
		}
	}
}
