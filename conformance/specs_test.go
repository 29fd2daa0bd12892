package conformance

import (
	"regexp"
	"strings"
	"testing"
)

func TestSpecText(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"[It] [sig-network] DNS should provide DNS for the cluster [Conformance]", "should provide DNS for the cluster"},
		{"[It] [sig-network] DNS should resolve DNS of partial qualified names for services [LinuxOnly] [Conformance]", "should resolve DNS of partial qualified names for services [LinuxOnly]"},
		{"[It] [sig-network] DNS should work with a service name that starts with a digit [FeatureGate:RelaxedServiceNameValidation] [Beta]", "should work with a service name that starts with a digit"},
		{"[It] [sig-network] DNS should support configurable pod resolv.conf", "should support configurable pod resolv.conf"},
		{"[SynchronizedBeforeSuite]", ""},
	} {
		if got := specText(tc.name); got != tc.want {
			t.Errorf("specText(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseJUnitAndTable(t *testing.T) {
	report := `<testsuites><testsuite>
<testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Conformance]" status="passed" time="12.5"></testcase>
<testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Provider:GCE]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" status="failed" time="600"><failure message="" type="failed">[FAILED] timed out&#xA;more</failure></testcase>
</testsuite></testsuites>`
	specs := []string{"should provide DNS for the cluster", "should provide DNS for services", "should provide DNS for pods for Hostname"}
	res, err := parseJUnit(strings.NewReader(report), specs)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[specs[0]]; r.Status != "passed" || r.Seconds != 12.5 {
		t.Errorf("%s: %+v", specs[0], r)
	}
	if r := res[specs[1]]; r.Status != "failed" || r.Failure != "[FAILED] timed out" {
		t.Errorf("%s: %+v", specs[1], r)
	}
	if r := res[specs[2]]; r.Status != "missing" {
		t.Errorf("%s: %+v", specs[2], r)
	}
	table, p, f, n := Table([]string{"iptables"}, specs, map[string]map[string]Result{"iptables": res})
	if p != 1 || f != 1 || n != 3 {
		t.Errorf("counts %d/%d/%d, want 1/1/3:\n%s", p, f, n, table)
	}
	if !strings.Contains(table, "| should provide DNS for services | failed 600 s |") {
		t.Errorf("table:\n%s", table)
	}
}

// TestFocusSelectsEachSpec: the focus of a list matches each of its specs'
// full names and not a spec outside it.
func TestFocusSelectsEachSpec(t *testing.T) {
	re := regexp.MustCompile(Focus(OtherSpecs))
	for _, s := range OtherSpecs {
		if !re.MatchString("[sig-network] DNS " + s) {
			t.Errorf("Focus(OtherSpecs) misses %q", s)
		}
	}
	for _, s := range ConformanceSpecs {
		if re.MatchString("[sig-network] DNS " + s + " [Conformance]") {
			t.Errorf("Focus(OtherSpecs) matches %q", s)
		}
		if !regexp.MustCompile(ConformanceFocus).MatchString("[sig-network] DNS " + s + " [Conformance]") {
			t.Errorf("ConformanceFocus misses %q", s)
		}
	}
}
