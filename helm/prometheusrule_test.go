package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/testbed"
)

// prometheusRuleCRDFile is the PrometheusRule CRD in the Prometheus
// Operator's module (promOperatorModule at promOperatorVersion, as for the
// ServiceMonitor).
const prometheusRuleCRDFile = "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"

// promtoolTests are the `promtool test rules` cases of the chart's alerts.
const promtoolTests = "testdata/prometheusrule_test.yaml"

var prometheusRules = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}

// renderedRule returns the PrometheusRule the chart renders with values,
// or nil when it renders none.
func renderedRule(t *testing.T, values string) *unstructured.Unstructured {
	t.Helper()
	_, objs, _ := render(t, values)
	var found *unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && o.GVK.Kind == "PrometheusRule" {
			if found != nil {
				t.Fatalf("two PrometheusRules rendered: %s, %s", found.GetName(), u.GetName())
			}
			found = u
		}
	}
	return found
}

// ruleSpec is the part of a PrometheusRule that is a Prometheus rule file.
type ruleSpec struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert       string
			Expr        string
			For         string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

func specOf(t *testing.T, u *unstructured.Unstructured) ruleSpec {
	t.Helper()
	raw, err := json.Marshal(u.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var s ruleSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("spec: %v", err)
	}
	return s
}

// TestPrometheusRuleRendered checks that the rules are off by default, and,
// when on, that each alert has a severity, a summary, a description and a
// runbook_url pointing at its section of docs/monitoring.md, and selects
// the release's metrics job.
func TestPrometheusRuleRendered(t *testing.T) {
	if u := renderedRule(t, ""); u != nil {
		t.Fatalf("PrometheusRule %s rendered by default", u.GetName())
	}
	u := renderedRule(t, "fullnameOverride: dns\nprometheus: {rules: {enabled: true, additionalLabels: {release: prom}}}")
	if u == nil {
		t.Fatal("no PrometheusRule rendered with prometheus.rules.enabled")
	}
	if u.GetNamespace() != DefaultNamespace || u.GetLabels()["release"] != "prom" {
		t.Errorf("PrometheusRule in %q with labels %v, want %s and release=prom", u.GetNamespace(), u.GetLabels(), DefaultNamespace)
	}
	doc := readDoc(t, "../docs/monitoring.md")
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(doc, -1) {
		anchors[githubAnchor(m[1])] = true
	}
	n := 0
	for _, g := range specOf(t, u).Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules belong elsewhere): %s", g.Name, r.Expr)
				continue
			}
			if !strings.Contains(r.Expr, `job="dns-metrics", namespace="kube-system"`) {
				t.Errorf("%s does not select the release's metrics job: %s", r.Alert, r.Expr)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			_, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "/docs/monitoring.md#")
			if !anchors[anchor] || anchor != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url %q is not a section of docs/monitoring.md named after the alert", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	if n == 0 {
		t.Fatal("PrometheusRule without rules")
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestPrometheusRulePromtool checks the rendered rules with Prometheus's
// own tool: `promtool check rules` parses every expression and template,
// and `promtool test rules` runs the cases of testdata on them. Every alert
// must have a case in which it fires and one in which it does not.
func TestPrometheusRulePromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package (tools/deps.sh does, as root)")
	}
	u := renderedRule(t, "prometheus: {rules: {enabled: true}}")
	if u == nil {
		t.Fatal("no PrometheusRule rendered with prometheus.rules.enabled")
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(u.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "prometheusrule.rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	promtoolRun(t, promtool, "check", "rules", rulesFile)

	raw, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatalf("%s: %v", promtoolTests, err)
	}
	if len(cases.RuleFiles) != 1 || cases.RuleFiles[0] != filepath.Base(rulesFile) {
		t.Fatalf("%s: rule_files %q, want [%s]", promtoolTests, cases.RuleFiles, filepath.Base(rulesFile))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range cases.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range specOf(t, u).Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] {
				t.Errorf("%s has no case in %s in which it fires", r.Alert, promtoolTests)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s has no case in %s in which it does not fire", r.Alert, promtoolTests)
			}
		}
	}
	// promtool reads rule_files relative to the test file.
	testFile := filepath.Join(dir, "prometheusrule_test.yaml")
	if err := os.WriteFile(testFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	promtoolRun(t, promtool, "test", "rules", testFile)
}

func promtoolRun(t *testing.T, promtool string, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s: %s", strings.Join(args[:2], " "), bytes.TrimSpace(out))
}

// TestPrometheusRuleCRD installs the Prometheus Operator's PrometheusRule
// CRD into a real kube-apiserver and creates the chart's PrometheusRule
// with strict field validation, as TestServiceMonitorCRD does for the
// ServiceMonitor; copies with one fault each are refused.
func TestPrometheusRuleCRD(t *testing.T) {
	if r := testbed.Unavailable(); r != "" {
		t.Skip("testbed: " + r)
	}
	crd := operatorCRD(t, prometheusRuleCRDFile, prometheusRules)
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	installCRD(t, ctx, tb, crd)
	dyn, err := dynamic.NewForConfig(tb.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	u := renderedRule(t, "prometheus: {rules: {enabled: true, additionalLabels: {release: prom}}}")
	if u == nil {
		t.Fatal("no PrometheusRule rendered with prometheus.rules.enabled")
	}
	ensureNamespace(t, ctx, tb, u.GetNamespace())
	res := dyn.Resource(prometheusRules).Namespace(u.GetNamespace())
	if _, err := res.Create(ctx, u, strict); err != nil {
		t.Fatalf("create PrometheusRule %s/%s: %v\n%s", u.GetNamespace(), u.GetName(), err, mustYAML(t, u))
	}

	for _, tc := range []struct {
		name   string
		mutate func(rule map[string]any)
		want   func(error) bool
	}{
		{"unknown field in a rule", func(r map[string]any) { r["exprs"] = r["expr"] }, apierrors.IsBadRequest},
		{"for not a duration", func(r map[string]any) { r["for"] = "ten minutes" }, apierrors.IsInvalid},
		{"labels not strings", func(r map[string]any) { r["labels"] = map[string]any{"severity": []any{"critical"}} }, apierrors.IsInvalid},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			b := u.DeepCopy()
			b.SetName("broken")
			groups, _, err := unstructured.NestedSlice(b.Object, "spec", "groups")
			if err != nil || len(groups) == 0 {
				t.Fatalf("spec.groups: %v (%d)", err, len(groups))
			}
			rules := groups[0].(map[string]any)["rules"].([]any)
			tc.mutate(rules[0].(map[string]any))
			if err := unstructured.SetNestedSlice(b.Object, groups, "spec", "groups"); err != nil {
				t.Fatal(err)
			}
			_, err = res.Create(ctx, b, strict)
			if err == nil {
				t.Fatalf("accepted:\n%s", mustYAML(t, b))
			}
			if !tc.want(err) {
				t.Errorf("refused with an unexpected reason (%v): %v", apierrors.ReasonForError(err), err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// operatorCRD returns the CRD file of the Prometheus Operator's module
// that defines gvr. It skips t as serviceMonitorCRD does.
func operatorCRD(t *testing.T, file string, gvr schema.GroupVersionResource) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found (%v): it downloads the %s CRD", err, gvr.Resource)
	}
	mod := promOperatorModule + "@" + promOperatorVersion
	cmd := exec.Command(goBin, "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir() // outside any module: go.mod stays as it is
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(out, &dl); err != nil && runErr == nil {
		t.Fatalf("go mod download -json %s: %v in output %q", mod, err, out)
	}
	switch {
	case dl.Error != "":
		t.Skipf("go mod download %s: %s", mod, dl.Error)
	case runErr != nil:
		t.Skipf("go mod download %s: %v: %s", mod, runErr, bytes.TrimSpace(stderr.Bytes()))
	}
	data, err := os.ReadFile(filepath.Join(dl.Dir, file))
	if err != nil {
		t.Fatalf("%s in %s: %v", file, mod, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if crd.Spec.Group != gvr.Group || crd.Spec.Names.Plural != gvr.Resource {
		t.Fatalf("%s defines %s.%s, want %s.%s", file, crd.Spec.Names.Plural, crd.Spec.Group, gvr.Resource, gvr.Group)
	}
	return crd
}
