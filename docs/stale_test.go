package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valueName is an inline code span that names a chart value, with an
// optional assignment: `frontend.bindTimeoutSeconds`, `service.keep=false`.
// Keys are lowerCamelCase: `cache.Get` is Go, and file names are skipped.
var (
	valueName = regexp.MustCompile("`([a-z][A-Za-z0-9]*(?:\\.[a-z][A-Za-z0-9]*)+)(?:[=:][^`]*)?`")
	fileName  = regexp.MustCompile(`\.(sock|go|md|ya?ml|json|txt|sh)$`)
)

// notValues are code spans that look like values and name on purpose what
// the chart refuses (helm/nodedns/README.md: the coredns chart's keys).
var notValues = map[string]bool{"image.repository": true, "resources.limits": true}

// chartValues reads helm/nodedns/values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "helm/nodedns/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// lookup reports whether the dotted path names a value: a key of every map
// on the way (a key under a map left empty by default, such as
// podAnnotations.x, is the user's own and counts).
func lookup(values map[string]any, path string) bool {
	var cur any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if len(m) == 0 {
			return true
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// TestDocsNameRealValues: a chart value named in the project's Markdown
// (a code span starting with one of values.yaml's top-level maps, such as
// `frontend.bindTimeoutSeconds`) exists in values.yaml.
func TestDocsNameRealValues(t *testing.T) {
	values := chartValues(t)
	checked := 0
	for _, file := range markdownFiles(t) {
		if file == "CHANGELOG.md" || strings.HasPrefix(file, "docs/studies/") {
			continue // history names what was true then
		}
		for i, line := range proseLines(t, file, false) {
			for _, m := range valueName.FindAllStringSubmatch(line, -1) {
				top, _, _ := strings.Cut(m[1], ".")
				if fileName.MatchString(m[1]) || notValues[m[1]] {
					continue
				}
				if _, ok := values[top].(map[string]any); !ok {
					continue // not a chart value: a file name, a Go identifier
				}
				checked++
				if !lookup(values, m[1]) {
					t.Errorf("%s:%d: `%s` is not a value of helm/nodedns/values.yaml", file, i+1, m[1])
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d value names checked: the pattern is broken", checked)
	}
}

// prose returns a file's text outside fenced code, lines joined by spaces,
// so that phrases wrapped across lines are found.
func prose(t *testing.T, file string) string {
	return strings.Join(strings.Fields(strings.Join(proseLines(t, file, false), " ")), " ")
}

// current lists the Markdown that says what is true now: not the history
// (CHANGELOG.md, dated studies).
func current(t *testing.T) []string {
	var out []string
	for _, f := range markdownFiles(t) {
		if f != "CHANGELOG.md" && !strings.HasPrefix(f, "docs/studies/") {
			out = append(out, f)
		}
	}
	return out
}

// TestFallbackPortDocs: the backend's fallback listener is on the node IP's
// port 53 in iptables and link-local modes and 5301 only in node-ip mode
// (backend.fallbackPort auto): a page or diagnose's fix that names 5301
// says it is node-ip mode's (or the backend's own default,
// NODEDNS_FALLBACK_PORT), on the same line or the one before or after.
func TestFallbackPortDocs(t *testing.T) {
	files := append(current(t), "frontend/diagnose/diagnose.go")
	for _, file := range files {
		if strings.HasPrefix(file, "loadtest/") {
			continue // its own simulated cluster, with its own ports
		}
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.Contains(line, "5301") {
				continue
			}
			ctx := line
			if i > 0 {
				ctx = lines[i-1] + " " + ctx
			}
			if i+1 < len(lines) {
				ctx += " " + lines[i+1]
			}
			if !strings.Contains(ctx, "node-ip") && !strings.Contains(ctx, "NODEDNS_FALLBACK_PORT") && !strings.Contains(ctx, "fallbackPort") {
				t.Errorf("%s:%d names port 5301 without saying it is node-ip mode's: %s", file, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestNoStepsForRefusedClusters: Chart.yaml's kubeVersion refuses clusters
// older than its minimum, so no page gives steps for them.
func TestNoStepsForRefusedClusters(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "helm/nodedns/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kubeVersion: ">=1\.(\d+)\.0-0"$`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`helm/nodedns/Chart.yaml has no kubeVersion ">=1.N.0-0"`)
	}
	older := regexp.MustCompile(`(?i)\b(before|older than|prior to|below|pre-)(?: Kubernetes)? ?1\.` + string(m[1]) + `\b|older clusters`)
	for _, file := range current(t) {
		if hit := older.FindString(prose(t, file)); hit != "" {
			t.Errorf("%s speaks of clusters the chart refuses (%q): kubeVersion is >=1.%s", file, hit, m[1])
		}
	}
}

// TestOperatorClaims pins claims of the operator's pages to the chart they
// describe.
func TestOperatorClaims(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The kube-dns Service has a port named metrics, which kube-prometheus
	// scrapes: monitoring.md says so.
	if !strings.Contains(read("helm/nodedns/templates/service.yaml"), "- name: metrics\n") {
		t.Error("the chart's kube-dns Service has no port named metrics any more: fix docs/monitoring.md")
	}
	if mon := prose(t, "docs/monitoring.md"); !strings.Contains(mon, "The kube-dns Service has one") || strings.Contains(mon, "has no such port") {
		t.Error("docs/monitoring.md must say the kube-dns Service has a metrics port")
	}
	// kubeadm upgrade keeps the CoreDNS Deployment's replicas
	// (kubernetes/kubernetes#85837); it does not bring CoreDNS back.
	if regexp.MustCompile(`(?i)kubeadm (puts|brings|scales) CoreDNS back`).MatchString(prose(t, "docs/migration.md")) {
		t.Error("docs/migration.md says kubeadm upgrade restores CoreDNS's replicas; it keeps the count")
	}
	// service.keep keeps a Service that selects the uninstalled pods: the
	// way back says how to point it elsewhere.
	if strings.Contains(read("helm/nodedns/values.yaml"), "\n  keep: true\n") &&
		!strings.Contains(prose(t, "docs/migration.md"), "patch service kube-dns") {
		t.Error("docs/migration.md does not say how to repoint the kube-dns Service that service.keep leaves behind")
	}
	// NOTES.txt picks a node that runs a nodedns pod, not any node.
	if notes := read("helm/nodedns/templates/NOTES.txt"); strings.Contains(notes, "kubectl get nodes") {
		t.Error("NOTES.txt picks a node among all nodes; it may run no nodedns pod")
	}
	// `kubectl rollout restart` keeps the probe address: every page that
	// names it says so, and the troubleshooting page does.
	found := false
	for _, file := range current(t) {
		for _, para := range strings.Split(strings.Join(proseLines(t, file, false), "\n"), "\n\n") {
			if !strings.Contains(para, "rollout restart") {
				continue
			}
			if !strings.Contains(para, "probe") {
				t.Errorf("%s names kubectl rollout restart without its caveat (the pods keep their probe address): %.80s", file, strings.TrimSpace(para))
			}
			found = found || file == "docs/troubleshooting.md"
		}
	}
	if !found {
		t.Error("docs/troubleshooting.md does not give the caveat of kubectl rollout restart")
	}
	// Every documented diagnose invocation in the pod takes the running
	// frontend's flags (--pid=1) or gives --backend-ready-url: the chart's
	// backend is not on the default 127.0.0.1:8181.
	inv := regexp.MustCompile(`nodedns-frontend diagnose( [^\n` + "`" + `]*)?`)
	for _, file := range current(t) {
		text := strings.ReplaceAll(read(file), "\\\n", " ")
		for _, m := range inv.FindAllString(text, -1) {
			if strings.Contains(m, "--") && !strings.Contains(m, "--pid") && !strings.Contains(m, "--backend-ready-url") && !strings.Contains(m, "[") {
				t.Errorf("%s: %q: without --pid=1 or --backend-ready-url the backend check fails in the chart's pods", file, m)
			}
		}
	}
}
