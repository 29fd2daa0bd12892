package helm

import (
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
)

// corefileLines strips comments and blank lines and trims indentation, so
// that two Corefiles compare by what CoreDNS parses.
func corefileLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// backendDefaults are nodedns-backend's defaults for the variables of its
// Corefile (backend/README.md, ENVIRONMENT).
var backendDefaults = map[string]string{
	"NODEDNS_BIND":           "127.0.0.1",
	"NODEDNS_PORT":           "5300",
	"NODEDNS_FALLBACK_PORT":  "5301",
	"NODEDNS_FALLBACK_BIND":  "127.0.0.1",
	"NODEDNS_FALLBACK_ALLOW": "local,nodes",
	"NODEDNS_CLUSTER_DOMAIN": "cluster.local",
	"NODEDNS_UPSTREAM":       "/etc/resolv.conf",
	"NODEDNS_HEALTH":         "127.0.0.1:9155",
	"NODEDNS_READY":          "127.0.0.1:8181",
	"NODEDNS_METRICS":        "127.0.0.1:9153",
	"NODEDNS_ENDPOINTSLICES": "spec",
}

var envRef = regexp.MustCompile(`\{\$([A-Za-z0-9_]+)\}`)

// loadCorefile replaces {$NAME} as CoreDNS does when it loads a Corefile,
// from env and then the backend's defaults.
func loadCorefile(s string, env []string) string {
	vars := maps.Clone(backendDefaults)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if v != "" {
			vars[k] = v
		}
	}
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		return vars[envRef.FindStringSubmatch(ref)[1]]
	})
}

// TestCorefileMatchesBackend checks that the chart's default servers are
// the backend's built-in Corefile, both as the backend loads them with the
// environment the chart gives it: the chart deploys what the backend's
// tests test. (The environment differs from the backend's defaults only in
// the probe address of NODEDNS_READY and NODEDNS_HEALTH.)
func TestCorefileMatchesBackend(t *testing.T) {
	builtin, err := os.ReadFile("../backend/Corefile")
	if err != nil {
		t.Fatal(err)
	}
	_, objs, _ := render(t, "")
	cm := ConfigMaps(objs)["nodedns-backend"]
	if cm == nil {
		t.Fatal("no backend ConfigMap")
	}
	cs, err := NodeContainers(nil, onEmptyCluster(), Node{Name: "n", IP: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	got := corefileLines(loadCorefile(cm.Data["Corefile"], cs[0].Env))
	want := corefileLines(loadCorefile(string(builtin), cs[0].Env))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("chart Corefile differs from backend/Corefile:\n--- chart\n%s\n--- backend\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCorefileStubDomains(t *testing.T) {
	_, objs, _ := render(t, "stubDomains:\n  consul.local: [10.150.0.1, 10.150.0.2]\nstubDomainCacheTTL: 10")
	got := strings.Join(corefileLines(ConfigMaps(objs)["nodedns-backend"].Data["Corefile"]), "\n")
	want := strings.Join([]string{
		"consul.local:{$NODEDNS_PORT} {",
		"bind {$NODEDNS_BIND}",
		"errors",
		"prometheus {$NODEDNS_METRICS}",
		"cache 10",
		"forward . 10.150.0.1 10.150.0.2",
		"}",
	}, "\n")
	if !strings.HasSuffix(got, want) {
		t.Errorf("Corefile does not end with the stub domain's block:\n%s", got)
	}
}

func TestCorefileUpstreams(t *testing.T) {
	_, objs, _ := render(t, "upstreams: [10.0.0.2, 10.0.0.3:5353]")
	got := ConfigMaps(objs)["nodedns-backend"].Data["Corefile"]
	if !strings.Contains(got, "forward . 10.0.0.2 10.0.0.3:5353 {") {
		t.Errorf("upstreams not in the Corefile:\n%s", got)
	}
}
