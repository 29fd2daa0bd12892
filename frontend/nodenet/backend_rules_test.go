package nodenet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestBackendRules checks the rules for the frontend's connections to a
// loopback backend: both directions NOTRACKed in raw OUTPUT and accepted in
// filter INPUT and OUTPUT, for the port of Backend only, and no rule for a
// backend the node reaches by another address.
func TestBackendRules(t *testing.T) {
	v4 := []string{
		"raw/OUTPUT -d 127.0.0.1 -p tcp --dport 5300 -m comment --comment nodedns: notrack tcp to backend 127.0.0.1:5300 -j NOTRACK",
		"raw/OUTPUT -s 127.0.0.1 -p tcp --sport 5300 -m comment --comment nodedns: notrack tcp from backend 127.0.0.1:5300 -j NOTRACK",
		"filter/INPUT -d 127.0.0.1 -p tcp --dport 5300 -m comment --comment nodedns: accept tcp to backend 127.0.0.1:5300 -j ACCEPT",
		"filter/INPUT -s 127.0.0.1 -p tcp --sport 5300 -m comment --comment nodedns: accept tcp from backend 127.0.0.1:5300 -j ACCEPT",
		"filter/OUTPUT -d 127.0.0.1 -p tcp --dport 5300 -m comment --comment nodedns: accept tcp to backend 127.0.0.1:5300 -j ACCEPT",
		"filter/OUTPUT -s 127.0.0.1 -p tcp --sport 5300 -m comment --comment nodedns: accept tcp from backend 127.0.0.1:5300 -j ACCEPT",
	}
	for _, tc := range []struct {
		name    string
		backend string
		family  Family
		want    []string // the backend's rules, as table/chain spec
		err     string
	}{
		{"none", "", IPv4, nil, ""},
		{"loopback", "127.0.0.1:5300", IPv4, v4, ""},
		{"other loopback address", "127.0.0.53:5300", IPv4, []string{
			"raw/OUTPUT -d 127.0.0.53 -p tcp --dport 5300 -m comment --comment nodedns: notrack tcp to backend 127.0.0.53:5300 -j NOTRACK",
		}, ""},
		{"IPv6 loopback", "[::1]:5300", IPv6, []string{
			"raw/OUTPUT -s ::1 -p tcp --sport 5300 -m comment --comment nodedns: notrack tcp from backend [::1]:5300 -j NOTRACK",
		}, ""},
		{"pod IP", "10.244.0.7:5300", IPv4, nil, ""},
		{"host name", "localhost:5300", IPv4, nil, ""},
		{"no port", "127.0.0.1", IPv4, nil, "backend \"127.0.0.1\""},
		{"service name", "127.0.0.1:domain", IPv4, nil, ""},
		{"port 0", "127.0.0.1:0", IPv4, nil, "port 0 out of range"},
		{"port too big", "127.0.0.1:70000", IPv4, nil, "port 70000 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Mode: ModeLinkLocal, DNSPort: 53, Backend: tc.backend}
			err := cfg.Validate()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Validate() = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range Rules(cfg) {
				if !strings.Contains(r.Comment, "backend") {
					continue
				}
				if r.Family != tc.family {
					t.Errorf("%s: family %v, want %v", r, r.Family, tc.family)
				}
				got = append(got, fmt.Sprintf("%s/%s %s", r.Table, r.Chain, strings.Join(r.Spec, " ")))
			}
			if tc.want == nil && len(got) != 0 {
				t.Fatalf("rules for backend %q: %q, want none", tc.backend, got)
			}
			if tc.want != nil && len(got) != 6 {
				t.Fatalf("%d rules for backend %q, want 6: %q", len(got), tc.backend, got)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("no rule %q in %q", w, got)
				}
			}
			// The owned addresses' rules are unchanged: 2 protocols × 5.
			if n := len(Rules(cfg)) - len(got); n != 10 {
				t.Errorf("%d rules for the owned address, want 10", n)
			}
		})
	}
}
