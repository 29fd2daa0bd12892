package helm

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"strings"
	"testing"
)

// TestFallbackListenerRestricted checks what keeps the backends' fallback
// listener from being an open resolver and the metrics off other
// addresses: the Corefile binds the fallback block to the node IP and
// restricts it with nodedns_acl to fallback.allowedNetworks, the
// ClusterRole lets the backend watch Nodes only when that list says
// nodes, and both containers' metrics listen on the node IP.
func TestFallbackListenerRestricted(t *testing.T) {
	for _, tc := range []struct {
		values string
		allow  string
		nodes  bool
	}{
		{``, "nodedns_acl local,nodes", true},
		{`fallback: {allowedNetworks: [local, nodes, 2600:1f14::/56]}`, "nodedns_acl local,nodes,2600:1f14::/56", true},
		{`fallback: {allowedNetworks: [10.244.0.0/16, 2001:db8::/64]}`, "nodedns_acl 10.244.0.0/16,2001:db8::/64", false},
	} {
		_, objs, _ := render(t, tc.values)
		var rules []string
		if role, ok := Find(objs, "ClusterRole", "nodedns").(*rbacv1.ClusterRole); ok {
			for _, r := range role.Rules {
				rules = append(rules, r.Resources...)
			}
		} else {
			t.Fatalf("%q: no ClusterRole nodedns", tc.values)
		}
		if got := slices.Contains(rules, "nodes"); got != tc.nodes {
			t.Errorf("%q: backend ClusterRole resources %v: nodes %v, want %v", tc.values, rules, got, tc.nodes)
		}
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
		// nodedns_acl's block keeps the Node networks' snapshot.
		for _, want := range []string{"nodedns_bind {$NODEDNS_FALLBACK_BIND}", tc.allow + " {", "snapshot {$NODEDNS_SNAPSHOT_DIR}"} {
			if !slices.Contains(lines, want) {
				t.Errorf("%q: fallback block lacks %q:\n%s", tc.values, want, fallback)
			}
		}
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
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
