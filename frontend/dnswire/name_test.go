package dnswire

import "testing"

func TestEqualName(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"Svc.Example.", "svc.example.", true},
		{"svc.example.", "svc.example", false},
		{"a.example.", "b.example.", false},
		{"\xc4.example.", "\xe4.example.", false}, // Latin-1 Ä/ä: not ASCII, not folded
		{"k.example.", "\u212a.example.", false},  // Kelvin sign: strings.EqualFold says equal
		{"", "", true},
	} {
		if got := EqualName(tc.a, tc.b); got != tc.want {
			t.Errorf("EqualName(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
