package helm

import (
	"slices"
	"strings"
	"testing"
)

// TestClusterDomainShared: the Corefile shapes the chart can render in
// which names of the cluster domain are answered by more than the
// kubernetes plugin of the frontend's block turn the frontend's
// search-path prefetch and denial below an NXDOMAIN off, and NOTES.txt
// names the value; the chart's defaults, and blocks that leave the
// cluster domain alone, keep both on.
func TestClusterDomainShared(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		off          bool
		note         string // in NOTES.txt when off
	}{
		{"defaults", ``, false, ""},
		{"stub domain outside", `stubDomains: {consul.local: ["10.150.0.1"]}`, false, ""},
		{"stub domain inside", `stubDomains: {stub.cluster.local: ["10.150.0.1"]}`, true, "stubDomains.stub.cluster.local overlaps clusterDomain cluster.local"},
		{"stub domain above", `stubDomains: {local: ["10.150.0.1"]}`, true, "stubDomains.local overlaps"},
		{"custom zone outside", "servers:\n- zones: [{zone: corp.example.}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: hosts}]", false, ""},
		{"custom zone inside", "servers:\n- zones: [{zone: db.cluster.local.}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: file, parameters: /etc/db.zone}]", true, "servers[0] serves zone db.cluster.local."},
		{"hosts in the frontend's block", "servers:\n- zones: [{zone: .}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: hosts, configBlock: \"10.0.0.1 legacy.cluster.local\\nfallthrough\"}, {name: nodedns_kubernetes, parameters: cluster.local}, {name: forward, parameters: \". /etc/resolv.conf\"}]", true, "servers[0] has the hosts plugin"},
		{"rewrite in the frontend's block", "servers:\n- zones: [{zone: .}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: rewrite, parameters: \"name old.cluster.local new.example.com\"}, {name: nodedns_kubernetes, parameters: cluster.local}]", true, "servers[0] has the rewrite plugin"},
		{"fallthrough for every zone", "servers:\n- zones: [{zone: .}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: nodedns_kubernetes, parameters: cluster.local, configBlock: \"pods insecure\\nfallthrough\"}, {name: forward, parameters: \". /etc/resolv.conf\"}]", true, "fall through for names it denies (fallthrough)"},
		{"fallthrough for the reverse zones", "servers:\n- zones: [{zone: .}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: nodedns_kubernetes, parameters: cluster.local in-addr.arpa ip6.arpa, configBlock: \"pods insecure\\nfallthrough in-addr.arpa ip6.arpa\"}, {name: forward, parameters: \". /etc/resolv.conf\"}]", false, ""},
		{"an unknown option of the plugin", "servers:\n- zones: [{zone: .}]\n  port: \"{$NODEDNS_PORT}\"\n  plugins: [{name: nodedns_kubernetes, parameters: cluster.local, configBlock: \"multicluster clusterset.local\"}]", true, "sets the kubernetes plugin's multicluster"},
		{"another cluster domain", "clusterDomain: corp.internal\nstubDomains: {cluster.local: [\"10.150.0.1\"]}", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := ParseValues(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
			if err != nil {
				t.Fatal(err)
			}
			fe := cs[slices.IndexFunc(cs, func(c Container) bool { return c.Spec.Name == "frontend" })].Command
			want := map[bool]string{false: "true", true: "false"}[tc.off]
			for _, flag := range []string{"--search-prefetch=", "--deny-below-nxdomain="} {
				if !slices.Contains(fe, flag+want) {
					t.Errorf("frontend command %q lacks %s%s", fe, flag, want)
				}
			}
			r, err := Render(vals, onEmptyCluster())
			if err != nil {
				t.Fatal(err)
			}
			notes := r.Notes
			if tc.off != strings.Contains(notes, "denial below a cached NXDOMAIN are off") {
				t.Errorf("NOTES.txt says the features are off: %v, want %v:\n%s", !tc.off, tc.off, notes)
			}
			if tc.note != "" && !strings.Contains(notes, tc.note) {
				t.Errorf("NOTES.txt lacks %q:\n%s", tc.note, notes)
			}
		})
	}
}
