package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// readDoc reads a component README; the chart is checked against what the
// binaries document.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: the chart is checked against it", err)
	}
	return string(b)
}

// section returns the part of a man-page README under "## NAME" up to the
// next "## ".
func section(doc, name string) string {
	_, after, ok := strings.Cut(doc, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(after, "\n## "); i >= 0 {
		return after[:i]
	}
	return after
}

var (
	longFlag  = regexp.MustCompile("`(--?[a-z][a-z0-9.-]*)")
	argFlag   = regexp.MustCompile(`^(--?[a-z][a-z0-9.-]*)`)
	envVarRef = regexp.MustCompile("`(NODEDNS_[A-Z_]+|GOMEMLIMIT|GOGC|GOMAXPROCS)`")
)

// TestFlagsDocumented checks every flag the chart passes, in every
// rendering case, against the FLAGS section of the binary's README, and
// every environment variable the backend gets against its ENVIRONMENT.
func TestFlagsDocumented(t *testing.T) {
	frontendDoc := readDoc(t, "../frontend/README.md")
	backendDoc := readDoc(t, "../backend/README.md")
	documented := func(doc string) map[string]bool {
		flags := map[string]bool{}
		for _, m := range longFlag.FindAllStringSubmatch(section(doc, "FLAGS"), -1) {
			flags[strings.TrimLeft(m[1], "-")] = true
		}
		return flags
	}
	flags := map[string]map[string]bool{"frontend": documented(frontendDoc), "backend": documented(backendDoc)}
	flags["holder"] = map[string]bool{}
	for _, m := range longFlag.FindAllStringSubmatch(section(frontendDoc, "HOLDER"), -1) {
		flags["holder"][strings.TrimLeft(m[1], "-")] = true
	}
	backendEnv := map[string]bool{}
	for _, m := range envVarRef.FindAllStringSubmatch(section(backendDoc, "ENVIRONMENT"), -1) {
		backendEnv[m[1]] = true
	}
	if len(flags["frontend"]) == 0 || len(flags["backend"]) == 0 || len(backendEnv) == 0 {
		t.Fatalf("no FLAGS or ENVIRONMENT found in the READMEs: %v %v", flags, backendEnv)
	}
	if !strings.Contains(frontendDoc, "nodedns-frontend diagnose") {
		t.Errorf("frontend/README.md does not document `nodedns-frontend diagnose`, which NOTES.txt tells users to run")
	}
	for _, tc := range renderCases {
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "n", IP: "192.0.2.1"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, c := range cs {
			want, args, doc := "nodedns-"+c.Spec.Name, c.Command[1:], c.Spec.Name
			if c.Spec.Name == "holder" {
				// nodedns-frontend hold: its flags are in the HOLDER section.
				want, doc = "nodedns-frontend", "holder"
				if len(args) == 0 || args[0] != "hold" {
					t.Errorf("%s: holder runs %q, want nodedns-frontend hold", tc.name, c.Command)
				} else {
					args = args[1:]
				}
			}
			if c.Command[0] != want {
				t.Errorf("%s: %s runs %q, want %q", tc.name, c.Spec.Name, c.Command[0], want)
			}
			for _, a := range args {
				m := argFlag.FindStringSubmatch(a)
				if m == nil {
					continue // a flag's value (-conf FILE)
				}
				if name := strings.TrimLeft(m[1], "-"); !flags[doc][name] {
					t.Errorf("%s: %s flag %s is not in its README's FLAGS (frontend/README.md HOLDER for the holder)", tc.name, c.Spec.Name, m[1])
				}
			}
			if c.Spec.Name != "backend" {
				continue
			}
			for _, e := range c.Spec.Env {
				if !backendEnv[e.Name] {
					t.Errorf("%s: backend variable %s is not in backend/README.md ENVIRONMENT", tc.name, e.Name)
				}
			}
		}
	}
}

// TestPortsMatchBinaries checks the chart's ports against the defaults the
// binaries document, so probes and Services hit what the processes serve.
func TestPortsMatchBinaries(t *testing.T) {
	frontendDoc := readDoc(t, "../frontend/README.md")
	backendDoc := readDoc(t, "../backend/README.md")
	for _, want := range []string{"`--health=ADDR` (default `127.0.0.1:9254`)", "`--metrics=ADDR` (default `:9253`)", "`--backend=ADDR` (default `127.0.0.1:5300`)", "`--backend-ready-url=URL` (default `http://127.0.0.1:8181/ready`)"} {
		if !strings.Contains(frontendDoc, want) {
			t.Errorf("frontend/README.md no longer says %s", want)
		}
	}
	for _, want := range []string{"`NODEDNS_READY` | `127.0.0.1:8181`", "`NODEDNS_HEALTH` | `127.0.0.1:9155`", "`NODEDNS_METRICS` | `127.0.0.1:9153`", "`NODEDNS_PORT` | `5300`", "`NODEDNS_FALLBACK_PORT` | `5301`"} {
		if !strings.Contains(backendDoc, want) {
			t.Errorf("backend/README.md no longer says %s", want)
		}
	}
}

var metricName = regexp.MustCompile(`\b((?:coredns|nodedns|process|go)_[a-z0-9_]+)\b`)

// TestDashboardMetrics checks that every series the Grafana dashboard
// queries is one the process it selects (endpoint="metrics-frontend" or
// "metrics-backend") documents in a METRICS section: the component's README
// or, for the frontend, its packages' READMEs, which it points at.
func TestDashboardMetrics(t *testing.T) {
	frontendMetrics := section(readDoc(t, "../frontend/README.md"), "METRICS")
	pkgDocs, err := filepath.Glob("../frontend/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgDocs {
		frontendMetrics += section(readDoc(t, p), "METRICS")
	}
	metrics := map[string]string{
		"metrics-frontend": frontendMetrics,
		"metrics-backend":  section(readDoc(t, "../backend/README.md"), "METRICS"),
	}
	raw, err := os.ReadFile("nodedns/dashboards/nodedns.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			endpoint := "metrics-frontend"
			if strings.Contains(target.Expr, `endpoint="metrics-backend"`) {
				endpoint = "metrics-backend"
			}
			for _, m := range metricName.FindAllString(target.Expr, -1) {
				name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				seen = append(seen, name)
				doc := metrics[endpoint]
				family := name[:strings.Index(name, "_")+1] + "*"
				if !strings.Contains(doc, "`"+name) && !strings.Contains(doc, "`"+family+"`") {
					t.Errorf("panel %q queries %s, which the %s README's METRICS does not list", p.Title, name, strings.TrimPrefix(endpoint, "metrics-"))
				}
			}
		}
	}
	for _, want := range []string{"coredns_dns_requests_total", "coredns_cache_hits_total", "coredns_cache_misses_total",
		"coredns_cache_served_stale_total", "nodedns_upstream_fallback_total", "nodedns_setup_errors_total",
		"process_resident_memory_bytes", "coredns_dns_request_duration_seconds"} {
		if !slices.Contains(seen, want) {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// TestNodeContainersEnv checks the downward API emulation against the
// DaemonSet: what node tests start is what kubelet would.
func TestNodeContainersEnv(t *testing.T) {
	cs, err := NodeContainers(map[string]any{"mode": "node-ip"}, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	fe := cs[1]
	for _, want := range []string{"NODE_NAME=node-a", "NODE_IP=192.0.2.7"} {
		if !slices.Contains(fe.Env, want) {
			t.Errorf("frontend env lacks %s: %q", want, fe.Env)
		}
	}
	for _, want := range []string{"--mode=node-ip", "--listen=192.0.2.7:53,10.96.0.10:53"} {
		if !slices.Contains(fe.Command, want) {
			t.Errorf("frontend command line lacks %s: %q", want, fe.Command)
		}
	}
	if fe.Spec.SecurityContext == nil || !slices.Contains(fe.Spec.SecurityContext.Capabilities.Add, corev1.Capability("NET_ADMIN")) {
		t.Errorf("Spec is not the rendered container")
	}
}
