package kubespec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/kubernetes"
)

// kubeconfig writes a kubeconfig for a server that is never contacted:
// setup builds clients and informers but starts nothing.
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSetup runs the directive's setup and checks which controller the
// kubernetes plugin's handler reads from.
func TestSetup(t *testing.T) {
	kc := kubeconfig(t)
	for _, tc := range []struct {
		name    string
		block   string
		spec    bool   // the handler reads from a spec Controller
		wantErr string // substring
	}{
		{"default", "pods insecure", true, ""},
		{"spec", "endpointslices spec\n pods verified\n labels app=web", true, ""},
		{"all", "endpointslices all", false, ""},
		{"all with ignore empty_service", "endpointslices all\n ignore empty_service", false, ""},
		{"noendpoints", "noendpoints", false, ""},
		{"ignore empty_service refused", "ignore empty_service", false, `"ignore empty_service" needs the endpoints of every Service`},
		{"kubernetes plugin's own error", "ttl 99999", false, "ttl must be in range"},
		{"unknown property", "bogus", false, "unknown property 'bogus'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := caddy.NewTestController("dns", "nodedns_kubernetes cluster.local in-addr.arpa {\n kubeconfig "+kc+"\n "+tc.block+"\n}")
			err := setup(c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("setup error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			plugins := dnsserver.GetConfig(c).Plugin
			if len(plugins) != 1 {
				t.Fatalf("%d handlers added, want 1", len(plugins))
			}
			k, ok := plugins[0](nil).(*kubernetes.Kubernetes)
			if !ok {
				t.Fatalf("handler is %T, want *kubernetes.Kubernetes", plugins[0](nil))
			}
			_, isSpec := k.APIConn.(*Controller)
			if isSpec != tc.spec {
				t.Errorf("APIConn is %T; spec controller %v, want %v", k.APIConn, isSpec, tc.spec)
			}
			if k.APIConn.HasSynced() {
				t.Error("a controller that never ran reports synced")
			}
		})
	}
}
