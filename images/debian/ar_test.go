package debian

import (
	"bytes"
	"strings"
	"testing"
)

// TestReadAr: members come back in order with their data, odd sizes
// padded; damaged archives are errors.
func TestReadAr(t *testing.T) {
	in := []arMember{{Name: "debian-binary", Data: []byte("2.0\n")}, {Name: "odd", Data: []byte("abc")}, {Name: "empty", Data: []byte{}}}
	got, err := readAr(bytes.NewReader(writeAr(in)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("%d members, want %d", len(got), len(in))
	}
	for i := range in {
		if got[i].Name != in[i].Name || !bytes.Equal(got[i].Data, in[i].Data) {
			t.Errorf("member %d: %q %q, want %q %q", i, got[i].Name, got[i].Data, in[i].Name, in[i].Data)
		}
	}
	good := writeAr(in)
	one := writeAr([]arMember{{Name: "data.tar", Data: []byte("0123456789")}})
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"no magic", []byte("not an archive"), "not an ar archive"},
		{"truncated member", one[:len(one)-3], `ar member "data.tar"`},
		{"bad terminator", append(append([]byte(nil), good[:8+58]...), 'x', 'x'), "terminator"},
		{"bad size", []byte(arMagic + strings.Repeat(" ", 48) + "-5        `\n"), "bad size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readAr(bytes.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}

func FuzzReadAr(f *testing.F) {
	f.Add(writeAr([]arMember{{Name: "debian-binary", Data: []byte("2.0\n")}, {Name: "x", Data: []byte("abc")}}))
	f.Add([]byte(arMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		readAr(bytes.NewReader(b)) // must not panic
	})
}
