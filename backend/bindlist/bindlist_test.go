package bindlist

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
		err  string
	}{
		{args: []string{"10.0.0.5"}, want: []string{"10.0.0.5"}},
		{args: []string{"10.0.0.5,fd00::5"}, want: []string{"10.0.0.5", "fd00::5"}},
		{args: []string{"10.0.0.5,", "fd00:0::5", "10.0.0.5"}, want: []string{"10.0.0.5", "fd00::5"}},
		{args: []string{","}, want: nil},
		{args: []string{"10.0.0.5,eth0"}, err: `"eth0" is not an IP address (in "10.0.0.5,eth0")`},
	} {
		got, err := Parse(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q): %v, want error %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

func TestSetup(t *testing.T) {
	c := caddy.NewTestController("dns", "nodedns_bind 127.0.0.1,::1\nnodedns_bind 127.0.0.1")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	if got := dnsserver.GetConfig(c).ListenHosts; !slices.Equal(got, []string{"127.0.0.1", "::1"}) {
		t.Errorf("ListenHosts %q, want [127.0.0.1 ::1]", got)
	}
	for _, in := range []string{"nodedns_bind", "nodedns_bind ,", "nodedns_bind 10.0.0.300"} {
		if err := setup(caddy.NewTestController("dns", in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
