package debian

import (
	"bytes"
	"strings"
	"testing"
)

const (
	sumA = "2928d3ca6ca8a3dc3f423f6752822b1f3614a5ba609ff7806bcba4449ffe90e1"
	sumB = "cb841d66950a43af4a398625313d2f3da9065299c9738538de6c2c3495857040"
)

// TestLockRoundTrip: FormatLock's output parses back to the same pins, in
// name order.
func TestLockRoundTrip(t *testing.T) {
	pkgs := []Package{
		{Name: "libxtables12", Version: "1.8.9-2", Architecture: "amd64", Size: 30752, SHA256: sumB, Filename: "pool/main/i/iptables/libxtables12_1.8.9-2_amd64.deb"},
		{Name: "iptables", Version: "1.8.9-2", Architecture: "amd64", Size: 360192, SHA256: sumA, Filename: "pool/main/i/iptables/iptables_1.8.9-2_amd64.deb"},
	}
	b := FormatLock([]string{"header"}, pkgs)
	got, err := ParseLock(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(got) != 2 || got[0].Name != "iptables" || got[1].Name != "libxtables12" || got[0].Size != 360192 || got[1].SHA256 != sumB {
		t.Errorf("parsed %+v", got)
	}
}

// TestParseLockErrors: a damaged or hostile lock is refused with the line
// and the reason.
func TestParseLockErrors(t *testing.T) {
	line := func(name, size, sum, path string) string {
		return name + " 1.0 amd64 " + size + " " + sum + " " + path + "\n"
	}
	ok := "pool/main/a/a/a_1.0_amd64.deb"
	for _, tc := range []struct{ name, in, err string }{
		{"empty", "# only a comment\n", "no packages"},
		{"fields", "a 1.0 amd64 10 " + sumA + "\n", "5 fields, want 6"},
		{"size", line("a", "ten", sumA, ok), `size "ten"`},
		{"sha256", line("a", "10", "ABC", ok), "not 64 lower-case hex"},
		{"path outside the pool", line("a", "10", sumA, "../etc/passwd.deb"), "not a .deb in the pool"},
		{"dot dot", line("a", "10", sumA, "pool/../../x.deb"), "not a .deb in the pool"},
		{"unsorted", line("b", "10", sumA, ok) + line("a", "10", sumA, ok), "line 2: a is not sorted after b"},
		{"repeated", line("a", "10", sumA, ok) + line("a", "10", sumA, ok), "repeated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseLock(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}

func FuzzParseLock(f *testing.F) {
	f.Add("# c\na 1.0 amd64 10 " + sumA + " pool/main/a/a/a_1.0_amd64.deb\n")
	f.Fuzz(func(t *testing.T, s string) {
		ParseLock(strings.NewReader(s)) // must not panic
	})
}
