package gen

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mix.txt")
	if err := os.WriteFile(file, []byte("# names\nfoo.bar 3\n\nbaz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec    string
		want    map[string]float64 // pattern → share
		wantErr string
	}{
		{spec: "flood", want: map[string]float64{"{rand}.flood.example.net": 1}},
		{spec: "file:" + file, want: map[string]float64{"foo.bar": 0.75, "baz": 0.25}},
		{spec: "file:" + file + ":1,flood:3", want: map[string]float64{"foo.bar": 0.1875, "baz": 0.0625, "{rand}.flood.example.net": 0.75}},
		{spec: "nope", wantErr: "neither file:PATH nor one of"},
		{spec: "flood:0", wantErr: "not positive"},
		{spec: "file:" + filepath.Join(dir, "missing"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		m, err := ParseMix(tc.spec)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		got := map[string]float64{}
		for _, e := range m.Entries() {
			got[e.Pattern] += e.Weight
		}
		for p, w := range tc.want {
			if math.Abs(got[p]-w) > 1e-9 {
				t.Errorf("%s: %s share %v, want %v (all: %v)", tc.spec, p, got[p], w, got)
			}
		}
	}
	for _, name := range BuiltinMixes() {
		if _, err := ParseMix(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

func TestPatterns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	m, err := NewMix([]Entry{{"svc-{n:20}.{rand}.x", 1}})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^svc-([0-9]|1[0-9])\.[a-z0-9]{12}\.x$`)
	seen := map[string]bool{}
	for range 1000 {
		n := m.Name(r)
		if !re.MatchString(n) {
			t.Fatalf("name %q does not match %s", n, re)
		}
		seen[n] = true
	}
	if len(seen) < 990 {
		t.Errorf("only %d distinct names of 1000", len(seen))
	}
	for _, bad := range []string{"a{n:0}", "a{x}", "a{rand", "a b"} {
		if _, err := NewMix([]Entry{{bad, 1}}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}
