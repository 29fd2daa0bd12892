package kubespec

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
)

// tokensOf returns the tokens of a directive as caddy hands them to setup.
func tokensOf(t *testing.T, input string) []caddyfile.Token {
	t.Helper()
	c := caddy.NewTestController("dns", input)
	var toks []caddyfile.Token
	for c.Next() {
		toks = append(toks, caddyfile.Token{File: c.File(), Line: c.Line(), Text: c.Val()})
	}
	return toks
}

func texts(toks []caddyfile.Token) string {
	var s []string
	for _, t := range toks {
		s = append(s, t.Text)
	}
	return strings.Join(s, " ")
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		input    string
		watch    string
		full     bool
		rest     string // tokens handed to the kubernetes plugin
		scanErr  string
		validErr string
	}{
		{"default is spec", "nodedns_kubernetes cluster.local {\n pods insecure\n}", WatchSpec, false,
			"nodedns_kubernetes cluster.local { pods insecure }", "", ""},
		{"no block", "nodedns_kubernetes cluster.local", WatchSpec, false, "nodedns_kubernetes cluster.local", "", ""},
		{"spec given", "nodedns_kubernetes cluster.local {\n endpointslices spec\n ttl 30\n}", WatchSpec, false,
			"nodedns_kubernetes cluster.local { ttl 30 }", "", ""},
		{"all", "nodedns_kubernetes cluster.local in-addr.arpa {\n endpointslices all\n}", WatchAll, true,
			"nodedns_kubernetes cluster.local in-addr.arpa { }", "", ""},
		{"noendpoints keeps the plugin's controller", "nodedns_kubernetes cluster.local {\n noendpoints\n}", WatchSpec, true,
			"nodedns_kubernetes cluster.local { noendpoints }", "", ""},
		{"bad mode", "nodedns_kubernetes cluster.local {\n endpointslices some\n}", "", false, "", `takes "spec" or "all"`, ""},
		{"mode without value", "nodedns_kubernetes cluster.local {\n endpointslices\n}", "", false, "", `takes "spec" or "all"`, ""},
		{"twice", "nodedns_kubernetes cluster.local {\n endpointslices all\n endpointslices spec\n}", "", false, "", "given twice", ""},
		{"ignore empty_service with spec", "nodedns_kubernetes cluster.local {\n ignore empty_service\n}", WatchSpec, false,
			"nodedns_kubernetes cluster.local { ignore empty_service }", "", `"ignore empty_service" needs the endpoints of every Service`},
		{"ignore empty_service with all", "nodedns_kubernetes cluster.local {\n endpointslices all\n ignore empty_service\n}", WatchAll, true,
			"nodedns_kubernetes cluster.local { ignore empty_service }", "", ""},
		{"multicluster with spec", "nodedns_kubernetes cluster.local clusterset.local {\n multicluster clusterset.local\n}", WatchSpec, false,
			"nodedns_kubernetes cluster.local clusterset.local { multicluster clusterset.local }", "", `"multicluster" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, rest, err := scan(tokensOf(t, tc.input))
			if tc.scanErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.scanErr) {
					t.Fatalf("scan error %v, want one saying %q", err, tc.scanErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.watch != tc.watch || o.full() != tc.full {
				t.Errorf("watch %q full %v, want %q %v", o.watch, o.full(), tc.watch, tc.full)
			}
			if got := texts(rest); got != tc.rest {
				t.Errorf("tokens for the kubernetes plugin %q, want %q", got, tc.rest)
			}
			err = o.validate()
			if tc.validErr == "" && err != nil {
				t.Errorf("validate: %v", err)
			}
			if tc.validErr != "" && (err == nil || !strings.Contains(err.Error(), tc.validErr)) {
				t.Errorf("validate error %v, want one saying %q", err, tc.validErr)
			}
		})
	}
}

// TestScanOptions checks that the properties shaping the informers and the
// client reach the options.
func TestScanOptions(t *testing.T) {
	o, _, err := scan(tokensOf(t, `nodedns_kubernetes cluster.local {
    pods verified
    zonal
    labels app=web,tier!=cache
    namespace_labels team in (a,b)
    apiserver_qps 50
    apiserver_burst 100
    apiserver_max_inflight 8
}`))
	if err != nil {
		t.Fatal(err)
	}
	want := options{watch: WatchSpec, podsVerified: true, zonal: true, labels: "app=web,tier!=cache",
		namespaceLabels: "team in (a,b)", apiQPS: "50", apiBurst: "100", apiMaxInflight: "8"}
	if o != want {
		t.Errorf("options %+v, want %+v", o, want)
	}
}
