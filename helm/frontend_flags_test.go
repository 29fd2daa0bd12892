package helm

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// chartLeavesDefault lists the frontend flags the chart deliberately does
// not pass, each with the reason. Every other frontend flag must be set by
// the chart in some rendering (renderCases): a flag added to the frontend
// but not wired into the chart fails TestChartWiresEveryFrontendFlag.
var chartLeavesDefault = map[string]string{
	"setup-network":           "the chart's pods always own the node's DNS addresses and rules (the default, true); false is for running the frontend by hand",
	"max-inflight-per-source": "its default, an eighth of --max-inflight, follows the chart's maxInflight",
	"version":                 "prints the version and exits",
}

// frontendFlagEntry is an entry of frontend/README.md's FLAGS section, the
// form frontend/readme_test.go requires of every flag newFlagSet defines.
var frontendFlagEntry = regexp.MustCompile("(?m)^- `--?([a-z][a-z0-9-]*)")

// TestChartWiresEveryFrontendFlag checks the chart against the frontend's
// flag definitions (frontend/config.go newFlagSet), through the README's
// FLAGS section, which frontend/readme_test.go holds equal to them: every
// flag is passed to the frontend container in some rendering, or is in
// chartLeavesDefault with a reason, and nothing in chartLeavesDefault is
// stale. The other direction, no argument the frontend does not accept, is
// TestFlagsDocumented (against the same section) and, as root,
// TestFrontendAcceptsRenderedArgs (against the binary).
func TestChartWiresEveryFrontendFlag(t *testing.T) {
	var flags []string
	for _, m := range frontendFlagEntry.FindAllStringSubmatch(section(readDoc(t, "../frontend/README.md"), "FLAGS"), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 10 {
		t.Fatalf("only %d flags found in frontend/README.md FLAGS: %v", len(flags), flags)
	}
	passed := map[string][]string{} // flag -> the renderings that pass it
	for _, tc := range renderCases {
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "n", IP: "192.0.2.1"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		i := slices.IndexFunc(cs, func(c Container) bool { return c.Spec.Name == "frontend" })
		if i < 0 {
			t.Fatalf("%s: no frontend container", tc.name)
		}
		for _, a := range cs[i].Command[1:] {
			if m := argFlag.FindStringSubmatch(a); m != nil {
				name := strings.TrimLeft(m[1], "-")
				passed[name] = append(passed[name], tc.name)
			}
		}
	}
	for _, f := range flags {
		reason, allowed := chartLeavesDefault[f]
		switch {
		case allowed && len(passed[f]) > 0:
			t.Errorf("--%s is in chartLeavesDefault (%q) but the chart passes it (%s): remove it from the list in helm/frontend_flags_test.go", f, reason, strings.Join(passed[f], ", "))
		case !allowed && len(passed[f]) == 0:
			t.Errorf("the chart never passes the frontend's --%s: add a value for it to helm/nodedns/values.yaml (frontend or cache block, with its comment) and a line to nodedns.frontendSettings in helm/nodedns/templates/_helpers.tpl, then run `make pod.yaml`; or, if the chart must leave it at its default, add it with the reason to chartLeavesDefault in helm/frontend_flags_test.go", f)
		}
	}
	var stale []string
	for f := range chartLeavesDefault {
		if !slices.Contains(flags, f) {
			stale = append(stale, f)
		}
	}
	sort.Strings(stale)
	for _, f := range stale {
		t.Errorf("chartLeavesDefault names --%s, which the frontend does not define (frontend/config.go newFlagSet): remove it from helm/frontend_flags_test.go", f)
	}
}
