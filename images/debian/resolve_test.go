package debian

import (
	"sort"
	"strings"
	"testing"
)

const testIndex = `Package: iptables
Version: 1.8.9-2
Architecture: amd64
Depends: libxtables12 (= 1.8.9-2), netbase (>= 6.0), libc6 (>= 2.34), libnftnl11 | libnftnl-old
Description: administration tools
 for packet filtering
Filename: pool/main/i/iptables/iptables_1.8.9-2_amd64.deb
Size: 360192
SHA256: 2928d3ca6ca8a3dc3f423f6752822b1f3614a5ba609ff7806bcba4449ffe90e1

Package: libxtables12
Version: 1.8.9-2
Architecture: amd64
Depends: libc6:any (>= 2.34)
Filename: pool/main/i/iptables/libxtables12_1.8.9-2_amd64.deb
Size: 30752
SHA256: cb841d66950a43af4a398625313d2f3da9065299c9738538de6c2c3495857040

Package: libc6
Version: 2.36-9
Architecture: amd64
Depends: libgcc-s1
Recommends: libidn2-0
Filename: pool/main/g/glibc/libc6_2.36-9_amd64.deb
Size: 2759320
SHA256: ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf

Package: libgcc-s1
Version: 12.2.0-14
Architecture: amd64
Depends: gcc-12-base (= 12.2.0-14), libc6 (>= 2.35)
Filename: pool/main/g/gcc-12/libgcc-s1_12.2.0-14_amd64.deb
Size: 49856
SHA256: 3016e62cb4b7cd8038822870601f5ed131befe942774d0f745622cc77d8a88f7

Package: gcc-12-base
Version: 12.2.0-14
Architecture: amd64
Filename: pool/main/g/gcc-12/gcc-12-base_12.2.0-14_amd64.deb
Size: 37596
SHA256: 1896a2aacf4ad681ff5eacc24a5b0ca4d5d9c9b9c9e4b6de5197bc1e116ea619

Package: netbase
Version: 6.4
Architecture: all
Filename: pool/main/n/netbase/netbase_6.4_all.deb
Size: 12800
SHA256: 29b23c48c0fe6f878e56c5ddc9f65d1c05d729360f3690a593a8c795031cd867

Package: libnftnl-new
Version: 1.2.4-2
Architecture: amd64
Provides: libnftnl11 (= 1.2.4-2)
Depends: libc6 (>= 2.34)
Filename: pool/main/libn/libnftnl/libnftnl-new_1.2.4-2_amd64.deb
Size: 61632
SHA256: 9e619e1470a1915264e906020f3bfc046fd8458043b1342686d997b5078213af

Package: base-files
Version: 12.4
Architecture: amd64
Pre-Depends: awk
Filename: pool/main/b/base-files/base-files_12.4_amd64.deb
Size: 70936
SHA256: 3eb1ea6d85488f488cc2a163b98ad640ef88cee4c79287cf14e361aaf6206f47

Package: needs-missing
Version: 1
Architecture: amd64
Depends: nothing-here | nor-here
Filename: pool/main/n/needs-missing/needs-missing_1_amd64.deb
Size: 1
SHA256: 3eb1ea6d85488f488cc2a163b98ad640ef88cee4c79287cf14e361aaf6206f47
`

// TestResolve: Depends and Pre-Depends are followed transitively (cycles
// included), an alternative is taken by name or through Provides,
// Recommends are not followed, and excluded packages drop their clause.
func TestResolve(t *testing.T) {
	idx, err := ParsePackages(strings.NewReader(testIndex))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		roots []string
		want  string
		err   string
	}{
		{name: "iptables", roots: []string{"iptables"}, want: "gcc-12-base iptables libc6 libgcc-s1 libnftnl-new libxtables12 netbase"},
		{name: "awk excluded", roots: []string{"base-files"}, want: "base-files"},
		{name: "unsatisfiable", roots: []string{"needs-missing"}, err: `no package in the index satisfies "nothing-here | nor-here"`},
		{name: "unknown root", roots: []string{"nope"}, err: "nope (needed by the image) is not in the index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs, err := Resolve(idx, tc.roots, map[string]bool{"awk": true})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range pkgs {
				names = append(names, p.Name)
			}
			if !sort.StringsAreSorted(names) || strings.Join(names, " ") != tc.want {
				t.Errorf("resolved %v, want %s", names, tc.want)
			}
		})
	}
	if p := idx["iptables"]; p.Size != 360192 || p.Filename != "pool/main/i/iptables/iptables_1.8.9-2_amd64.deb" || p.Architecture != "amd64" {
		t.Errorf("iptables stanza parsed as %+v", p)
	}
}

func FuzzParsePackages(f *testing.F) {
	f.Add(testIndex)
	f.Add("Package: x\nVersion: 1\nDepends: a | b (>= 1) [amd64], c:any\nFilename: pool/x.deb\nSHA256: ab\n")
	f.Fuzz(func(t *testing.T, s string) {
		idx, err := ParsePackages(strings.NewReader(s))
		if err != nil {
			return
		}
		for name := range idx {
			Resolve(idx, []string{name}, nil) // must not panic
		}
	})
}
