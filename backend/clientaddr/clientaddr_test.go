package clientaddr

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/clientopt"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		trusted int // prefixes; -1: error
	}{
		{"nodedns_client", 2},
		{"nodedns_client none", 0},
		{"nodedns_client 127.0.0.1/32 ::1/128", 2},
		{"nodedns_client 127.0.0.1", -1},
		{"nodedns_client {\n  from 127.0.0.1\n}", -1},
		{"nodedns_client\nnodedns_client", -1},
	} {
		cl, err := parse(caddy.NewTestController("dns", tc.in))
		switch {
		case tc.trusted < 0 && err == nil:
			t.Errorf("%q: no error", tc.in)
		case tc.trusted >= 0 && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case err == nil && len(cl.trusted) != tc.trusted:
			t.Errorf("%q: trusted %v", tc.in, cl.trusted)
		}
	}
}

// TestServeDNS: the option is removed from every query; the next plugin
// sees the pod as the source only for a trusted one.
func TestServeDNS(t *testing.T) {
	pod := netip.MustParseAddr("10.1.2.3")
	for _, tc := range []struct {
		name    string
		conf    string
		w       *test.ResponseWriter
		claim   bool
		wantSrc string
	}{
		{"tcp loopback", "nodedns_client", &test.ResponseWriter{TCP: true, RemoteIP: "127.0.0.1"}, true, "10.1.2.3"},
		{"tcp loopback v6", "nodedns_client", &test.ResponseWriter{TCP: true, RemoteIP: "::1"}, true, "10.1.2.3"},
		{"udp loopback", "nodedns_client", &test.ResponseWriter{RemoteIP: "127.0.0.1"}, true, "127.0.0.1"},
		{"tcp other", "nodedns_client", &test.ResponseWriter{TCP: true, RemoteIP: "10.9.9.9"}, true, "10.9.9.9"},
		{"none", "nodedns_client none", &test.ResponseWriter{TCP: true, RemoteIP: "127.0.0.1"}, true, "127.0.0.1"},
		{"narrowed", "nodedns_client 127.0.0.1/32", &test.ResponseWriter{TCP: true, RemoteIP: "127.0.0.2"}, true, "127.0.0.2"},
		{"no option", "nodedns_client", &test.ResponseWriter{TCP: true, RemoteIP: "127.0.0.1"}, false, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := parse(caddy.NewTestController("dns", tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			var src string
			var carried bool
			cl.Next = plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
				host, _, _ := net.SplitHostPort(w.RemoteAddr().String())
				src, carried = host, clientopt.Has(r)
				return dns.RcodeSuccess, nil
			})
			m := new(dns.Msg)
			m.SetQuestion("example.org.", dns.TypeA)
			m.SetEdns0(1232, false)
			if tc.claim {
				m.IsEdns0().Option = append(m.IsEdns0().Option, clientopt.Option(pod))
			}
			if _, err := cl.ServeDNS(context.Background(), tc.w, m); err != nil {
				t.Fatal(err)
			}
			if src != tc.wantSrc || carried {
				t.Errorf("next plugin saw source %s (option still there: %v), want %s", src, carried, tc.wantSrc)
			}
		})
	}
}
