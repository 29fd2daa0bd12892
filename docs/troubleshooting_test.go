package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	testName    = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	subtestName = regexp.MustCompile(`"([^"]+)"`)
	testLink    = regexp.MustCompile(`\]\(([^()\s]+_test\.go)\)`)
)

// TestTroubleshootingReproduced: every symptom of docs/troubleshooting.md
// names the tests that reproduce it, and each exists: the test function in
// one of the files its "Reproduced by" line links, each quoted subtest
// name as a string in one of them.
func TestTroubleshootingReproduced(t *testing.T) {
	const page = "docs/troubleshooting.md"
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(b), "\n## By symptom\n")
	if !ok {
		t.Fatalf("%s has no \"## By symptom\" section", page)
	}
	body, _, _ = strings.Cut(body, "\n## ")
	sections := strings.Split(body, "\n### ")[1:]
	if len(sections) < 8 {
		t.Fatalf("%s lists %d symptoms, want the 8 pods report", page, len(sections))
	}
	for _, sec := range sections {
		symptom, _, _ := strings.Cut(sec, "\n")
		_, repro, ok := strings.Cut(sec, "**Reproduced by**:")
		if !ok {
			t.Errorf("%s: %q has no \"Reproduced by\" line", page, symptom)
			continue
		}
		repro, _, _ = strings.Cut(repro, "\n\n")
		repro = strings.Join(strings.Fields(repro), " ") // names wrap across lines
		var sources []string
		for _, m := range testLink.FindAllStringSubmatch(repro, -1) {
			src, err := os.ReadFile(filepath.Join(root, "docs", m[1]))
			if err != nil {
				t.Errorf("%s: %q links %s: %v", page, symptom, m[1], err)
				continue
			}
			sources = append(sources, string(src))
		}
		tests := testName.FindAllStringSubmatch(repro, -1)
		if len(sources) == 0 || len(tests) == 0 {
			t.Errorf("%s: %q links no test file or names no test", page, symptom)
			continue
		}
		has := func(needle string) bool {
			for _, s := range sources {
				if strings.Contains(s, needle) {
					return true
				}
			}
			return false
		}
		for _, m := range tests {
			if !has("func " + m[1] + "(") {
				t.Errorf("%s: %q names %s, which no linked file defines", page, symptom, m[1])
			}
		}
		for _, m := range subtestName.FindAllStringSubmatch(repro, -1) {
			if !has(`"` + m[1] + `"`) {
				t.Errorf("%s: %q names subtest %q, found in no linked file", page, symptom, m[1])
			}
		}
	}
}
