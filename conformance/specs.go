package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ConformanceSpecs are the `[sig-network] DNS ... [Conformance]` specs of
// k8s.io/kubernetes v1.36.3 test/e2e/network/dns.go, by the text that
// follows "[sig-network] DNS " in their names.
var ConformanceSpecs = []string{
	"should provide DNS for the cluster",
	"should provide /etc/hosts entries for the cluster",
	"should provide DNS for services",
	"should resolve DNS of partial qualified names for services [LinuxOnly]",
	"should provide DNS for pods for Hostname",
	"should provide DNS for pods for Subdomain",
	"should provide DNS for ExternalName services",
	"should support configurable pod DNS nameservers",
}

// OtherSpecs are the other specs of the same file that need neither the
// internet nor GCE (the "[Provider:GCE]" spec resolves google.com), by the
// text that follows "[sig-network] DNS ".
var OtherSpecs = []string{
	"should resolve DNS of partial qualified names for the cluster [LinuxOnly]",
	"should support configurable pod resolv.conf",
	"should work with the pod containing more than 6 DNS search paths and longer than 256 search list characters",
	"should work with a search path containing an underscore and a search path with a single dot",
	"should work with a service name that starts with a digit",
	// The "DNS HostNetwork" describe of the same file.
	"HostNetwork should resolve DNS of partial qualified names for services on hostNetwork pods with dnsPolicy: ClusterFirstWithHostNet [LinuxOnly]",
	"HostNetwork spec.Hostname field is not silently ignored and is used for hostname for a Pod",
	"HostNetwork spec.Hostname field is silently ignored and the node hostname is used when hostNetwork is set to true for a Pod",
}

// ConformanceFocus is the --ginkgo.focus of the conformance pass.
const ConformanceFocus = `\[sig-network\] DNS.*\[Conformance\]`

// Focus is the --ginkgo.focus selecting specs (texts of ConformanceSpecs
// or OtherSpecs) and nothing else of the suite.
func Focus(specs []string) string {
	var alts []string
	for _, s := range specs {
		alts = append(alts, regexp.QuoteMeta(s))
	}
	return `\[sig-network\] DNS (` + strings.Join(alts, "|") + `)`
}

// Result is one spec's outcome in one run.
type Result struct {
	Status  string  // passed, failed, skipped, or "missing" when the report lacks it
	Seconds float64 // the spec's run time
	Failure string  // the first line of the failure message
}

type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Time    string `xml:"time,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ParseJUnit reads the e2e.test JUnit report at path and returns the
// results of specs (their texts, as in ConformanceSpecs) by text. A spec
// the report does not hold is "missing".
func ParseJUnit(path string, specs []string) (map[string]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("junit report: %w", err)
	}
	defer f.Close()
	return parseJUnit(f, specs)
}

func parseJUnit(r io.Reader, specs []string) (map[string]Result, error) {
	var js junitSuites
	if err := xml.NewDecoder(r).Decode(&js); err != nil {
		return nil, fmt.Errorf("junit report: %w", err)
	}
	out := map[string]Result{}
	for _, s := range specs {
		out[s] = Result{Status: "missing"}
	}
	for _, suite := range js.Suites {
		for _, c := range suite.Cases {
			text := specText(c.Name)
			prev, ok := out[text]
			if !ok {
				continue
			}
			// A spec outside the focus is in the report too, skipped:
			// "should provide DNS for the cluster [Provider:GCE]" has the
			// text of a conformance spec once its label is dropped.
			if c.Skipped != nil && prev.Status != "missing" {
				continue
			}
			res := Result{Status: c.Status}
			res.Seconds, _ = strconv.ParseFloat(c.Time, 64)
			if c.Failure != nil {
				res.Status = "failed"
				// Ginkgo leaves the attribute empty and puts the
				// "[FAILED] ..." text in the element.
				res.Failure = firstLine(c.Failure.Message)
				if res.Failure == "" {
					res.Failure = firstLine(c.Failure.Text)
				}
			} else if c.Skipped != nil && res.Status == "" {
				res.Status = "skipped"
			}
			if res.Status == "" {
				res.Status = "passed"
			}
			out[text] = res
		}
	}
	return out, nil
}

// labelSuffix matches one label Ginkgo appends to a JUnit test case name
// ("[Conformance]", "[FeatureGate:...]", "[Beta]", ...).
var labelSuffix = regexp.MustCompile(` \[[A-Za-z]+(:[A-Za-z0-9]+)?\]$`)

// specText turns a JUnit case name ("[It] [sig-network] DNS should ...
// [Conformance]") into the spec's text as ConformanceSpecs spells it:
// trailing labels dropped, except "[LinuxOnly]", which the spec's own
// text holds.
func specText(name string) string {
	i := strings.Index(name, "[sig-network] DNS ")
	if i < 0 {
		return ""
	}
	text := name[i+len("[sig-network] DNS "):]
	for !strings.HasSuffix(text, " [LinuxOnly]") {
		m := labelSuffix.FindStringIndex(text)
		if m == nil {
			break
		}
		text = text[:m[0]]
	}
	return text
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// Table formats results (design → spec text → result) as a Markdown table,
// one row per spec, one column per design, and returns it with the counts.
func Table(designs []string, specs []string, results map[string]map[string]Result) (table string, passed, failed, total int) {
	var b strings.Builder
	b.WriteString("| spec |")
	for _, d := range designs {
		fmt.Fprintf(&b, " %s |", d)
	}
	b.WriteString("\n|---|")
	for range designs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, s := range specs {
		fmt.Fprintf(&b, "| %s |", s)
		for _, d := range designs {
			r, ok := results[d][s]
			if !ok {
				r = Result{Status: "missing"}
			}
			total++
			switch r.Status {
			case "passed":
				passed++
				fmt.Fprintf(&b, " passed %.0f s |", r.Seconds)
			case "skipped", "missing":
				fmt.Fprintf(&b, " %s |", r.Status)
			default:
				failed++
				fmt.Fprintf(&b, " %s %.0f s |", r.Status, r.Seconds)
			}
		}
		b.WriteString("\n")
	}
	return b.String(), passed, failed, total
}

// Failures lists each failed spec with its design and first failure line.
func Failures(designs []string, specs []string, results map[string]map[string]Result) string {
	var lines []string
	for _, d := range designs {
		for _, s := range specs {
			if r := results[d][s]; r.Status == "failed" {
				lines = append(lines, fmt.Sprintf("- %s / %s: %s", d, s, r.Failure))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
