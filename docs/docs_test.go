package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, seen from this package.
const root = ".."

// lineLimits are the most lines a Markdown file may have, by the first
// pattern its path (relative to root, slash-separated) matches.
var lineLimits = []struct {
	pattern string // filepath.Match pattern
	max     int
}{
	{"README.md", 120},
	{"docs/*.md", 300},
	{"docs/studies/*.md", 300},
}

// skipDirs are trees whose Markdown is not the project's own prose.
var skipDirs = map[string]bool{".git": true, "vendor": true, "bin": true, "node_modules": true, "out": true}

// markdownFiles lists the tree's Markdown files, slash-separated and
// relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	if len(files) == 0 {
		t.Fatalf("no Markdown files under %s", root)
	}
	return files
}

// proseLines returns the lines of a Markdown file, those of fenced code
// blocks left empty so that examples in code are not taken for links or
// headings; with blankCode, inline code spans are blanked out too.
func proseLines(t *testing.T, file string, blankCode bool) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatalf("open %s: %v", file, err)
	}
	defer f.Close()
	var lines []string
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines = append(lines, "")
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			lines = append(lines, "")
			continue
		}
		if blankCode {
			line = inlineCode.ReplaceAllString(line, "``")
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return lines
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// link matches the target of an inline link or image: ](target) or
	// ](target "title").
	link = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
)

// anchor is the fragment GitHub gives a heading: lower case, punctuation
// dropped (letters, digits, spaces, hyphens and underscores kept), spaces
// turned into hyphens.
func anchor(text string) string {
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns every fragment a Markdown file's headings give, with
// GitHub's -1, -2... suffixes for repeated headings.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range proseLines(t, file, false) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := anchor(strings.ReplaceAll(m[1], "`", ""))
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// TestRelativeLinks checks that every relative link of every Markdown file
// names a file or directory that exists and, when it has a fragment and
// names a Markdown file (or its own page), a heading of that file.
func TestRelativeLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	checked := 0
	for _, file := range markdownFiles(t) {
		for i, line := range proseLines(t, file, true) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					if strings.HasPrefix(path, "/") {
						t.Errorf("%s:%d: %q is absolute; links are relative to the file", file, i+1, target)
						continue
					}
					resolved = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", file, i+1, target, resolved)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(resolved, ".md") {
					continue
				}
				if cache[resolved] == nil {
					cache[resolved] = anchors(t, resolved)
				}
				if !cache[resolved][frag] {
					t.Errorf("%s:%d: link %q: %s has no heading for #%s", file, i+1, target, resolved, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link pattern is broken")
	}
}

// TestLineLimits checks that the README and the pages of docs/ stay short
// enough to read as references.
func TestLineLimits(t *testing.T) {
	matched := 0
	for _, file := range markdownFiles(t) {
		for _, l := range lineLimits {
			ok, err := filepath.Match(l.pattern, file)
			if err != nil {
				t.Fatalf("pattern %q: %v", l.pattern, err)
			}
			if !ok {
				continue
			}
			matched++
			if n := len(proseLines(t, file, false)); n > l.max {
				t.Errorf("%s has %d lines, more than %d: move history to CHANGELOG.md or a dated study under docs/studies/", file, n, l.max)
			}
			break
		}
	}
	if matched < 3 {
		t.Fatalf("only %d files matched the line limits' patterns", matched)
	}
}

// TestAnchor pins the heading-to-fragment rule the link check relies on.
func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Hostile and broken neighbours", "hostile-and-broken-neighbours"},
		{"Fits (the CPU; least squares over 10, 40, 80 nodes)", "fits-the-cpu-least-squares-over-10-40-80-nodes"},
		{"Real nodes: link-local mode, kubelet's clusterDNS changed", "real-nodes-link-local-mode-kubelets-clusterdns-changed"},
		{"Runs 1–3", "runs-13"},
		{"NodeDNSDown", "nodednsdown"},
		{"A [linked](x.md) heading", "a-linked-heading"},
		{"The `--shed-delay` flag", "the---shed-delay-flag"},
	} {
		if got := anchor(tc.heading); got != tc.want {
			t.Errorf("anchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}
