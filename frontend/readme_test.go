package main

import (
	"flag"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// readmeSection returns the text of README.md's "## name" section.
func readmeSection(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+name+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", name)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestREADMEListsEveryFlag checks that each registered flag is listed in
// the FLAGS section with its current default, and nothing else is.
func TestREADMEListsEveryFlag(t *testing.T) {
	var cfg config
	checkFlagsListed(t, "FLAGS", newFlagSet(&cfg, io.Discard))
}

// checkFlagsListed checks that the README section lists every flag of fs,
// each with its default, and no other.
func checkFlagsListed(t *testing.T, section string, fs *flag.FlagSet) {
	t.Helper()
	sec := readmeSection(t, section)
	entry := regexp.MustCompile("(?m)^- `--?([a-z-]+)(?:=[^`]*)?` \\(default (none|`[^`]*`)\\)")
	listed := map[string]string{}
	for _, m := range entry.FindAllStringSubmatch(sec, -1) {
		listed[m[1]] = strings.Trim(m[2], "`")
	}
	fs.VisitAll(func(f *flag.Flag) {
		want := f.DefValue
		if want == "" {
			want = "none"
		}
		got, ok := listed[f.Name]
		switch {
		case !ok:
			t.Errorf("README.md %s lacks --%s (default %s)", section, f.Name, want)
		case got != want:
			t.Errorf("README.md %s: --%s default %q, the flag's is %q", section, f.Name, got, want)
		}
		delete(listed, f.Name)
	})
	for name := range listed {
		t.Errorf("README.md %s lists --%s, which is not a flag", section, name)
	}
}

// TestREADMEListsEveryMetric runs the frontend and checks that every series
// it exports (besides the Go and process collectors) is in METRICS.
func TestREADMEListsEveryMetric(t *testing.T) {
	sec := readmeSection(t, "METRICS")
	b := dnstest.Start(t, &backend{})
	l := startRun(t, baseArgs(t, b.Addr)...)
	// Touch the paths whose series appear only once used.
	dnstest.Exchange(t, "udp", l.DNS[0], dnstest.Query("example.org", 1))
	resp, err := http.Get("http://" + l.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	names := regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(string(body), -1)
	if len(names) < 10 {
		t.Fatalf("only %d series exported", len(names))
	}
	exported := map[string]bool{}
	for _, m := range names {
		exported[m[1]] = true
	}
	for _, m := range regexp.MustCompile("(?m)^- `((?:nodedns|coredns)_[a-z_]+)").FindAllStringSubmatch(sec, -1) {
		if !exported[m[1]] {
			t.Errorf("README.md METRICS lists %s, which is not exported", m[1])
		}
	}
	for _, m := range names {
		name := m[1]
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		if !strings.Contains(sec, "`"+name+"`") && !strings.Contains(sec, "`"+name+"{") {
			t.Errorf("README.md METRICS lacks %s", name)
		}
	}
}
