package resolver

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func TestSearchPathAbove(t *testing.T) {
	tests := []struct {
		name string
		want [aboveKeys]string // "" where there is none
	}{
		{"x.example.net.team-a.svc.cluster.local.", [aboveKeys]string{"net.team-a.svc.cluster.local.", "team-a.svc.cluster.local.", ""}},
		{"x.example.net.svc.cluster.local.", [aboveKeys]string{"example.net.svc.cluster.local.", "net.svc.cluster.local.", ""}},
		{"X.Example.NET.Cluster.Local.", [aboveKeys]string{"", "", "net.cluster.local."}},
		{"web.team-a.svc.cluster.local.", [aboveKeys]string{"", "team-a.svc.cluster.local.", ""}},
		{"team-a.svc.cluster.local.", [aboveKeys]string{}},
		{"svc.cluster.local.", [aboveKeys]string{}},
		{"net.cluster.local.", [aboveKeys]string{}},                 // nothing between it and the domain
		{"10-0-0-1.team-a.pod.cluster.local.", [aboveKeys]string{}}, // pod.DOMAIN is NODATA: no level
		{"a.b.example.com.", [aboveKeys]string{}},
		{"a.b.xcluster.local.", [aboveKeys]string{}},
		// The plugin answers every name that begins with ns.dns.DOMAIN by
		// its name-server rule, whatever is above it (ns.dns.DOMAIN has A
		// records while dns.DOMAIN is NXDOMAIN); other names under dns are
		// denied by it as under any label.
		{"ns.dns.cluster.local.", [aboveKeys]string{}},
		{"ns.dns.cluster.local.cluster.local.", [aboveKeys]string{}},
		{"ns.dns.cluster.local.x.team-a.svc.cluster.local.", [aboveKeys]string{}},
		{"x.ns.dns.cluster.local.", [aboveKeys]string{"", "", "dns.cluster.local."}},
		{"ns.dns.cluster.localx.com.cluster.local.", [aboveKeys]string{"", "", "com.cluster.local."}},
		{"ns.dnsx.cluster.local.", [aboveKeys]string{"", "", "dnsx.cluster.local."}},
	}
	s, err := newSearchPath("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		var q dnswire.Query
		if err := dnswire.ParseQuery(pack(t, tt.name, dns.TypeAAAA, func(m *dns.Msg) { m.SetEdns0(1232, true) }), &q); err != nil {
			t.Fatal(err)
		}
		var b [aboveKeys][dnswire.MaxKeyLen]byte
		var got [aboveKeys]string
		for i, k := range s.above(q.Key(), &b) {
			if k == nil {
				continue
			}
			name, _, err := dns.UnpackDomainName(dnswire.KeyName(k), 0)
			if err != nil {
				t.Fatalf("%s: key %q: %v", tt.name, k, err)
			}
			if qt, qc, fl := dnswire.KeyQuestion(k); qt != dns.TypeAAAA || qc != dns.ClassINET || fl != dnswire.KeyDO {
				t.Errorf("%s: key %q: type %d class %d flags %d, want the query's", tt.name, k, qt, qc, fl)
			}
			got[i] = name
		}
		if got != tt.want {
			t.Errorf("%s: above %q, want %q", tt.name, got, tt.want)
		}
	}
	// TXT: the plugin denies an existing namespace (it has no TXT record
	// and no record of another type) while its Services are NODATA, so no
	// namespace is a cut for TXT; the Service and domain levels are.
	for _, tt := range []struct {
		name string
		want [aboveKeys]string
	}{
		{"x.web.team-a.svc.cluster.local.", [aboveKeys]string{"web.team-a.svc.cluster.local.", "", ""}},
		{"web.team-a.svc.cluster.local.", [aboveKeys]string{}},
		{"x.example.cluster.local.", [aboveKeys]string{"", "", "example.cluster.local."}},
	} {
		var b [aboveKeys][dnswire.MaxKeyLen]byte
		var got [aboveKeys]string
		for i, k := range s.above(keyOf(t, tt.name, dns.TypeTXT, nil), &b) {
			if k != nil {
				got[i], _, _ = dns.UnpackDomainName(dnswire.KeyName(k), 0)
			}
		}
		if got != tt.want {
			t.Errorf("%s TXT: above %q, want %q", tt.name, got, tt.want)
		}
	}
	var nilPath *searchPath
	var b [aboveKeys][dnswire.MaxKeyLen]byte
	for _, k := range nilPath.above(keyOf(t, "x.y.ns.svc.cluster.local.", dns.TypeA, nil), &b) {
		if k != nil {
			t.Errorf("no search path: above gives %q", k)
		}
	}
}

// TestDenyBelowNXDOMAIN walks one random name through a pod's search path,
// which caches the cuts above its tries, then another under the same last
// label: its three tries are answered NXDOMAIN by the cache, with the
// cut's SOA and the cut's remaining TTL, and the backend is asked only
// the name as it is, started by the first try. Without the option, the
// tries go to the backend.
func TestDenyBelowNXDOMAIN(t *testing.T) {
	tries := []string{".team-a.svc.cluster.local.", ".svc.cluster.local.", ".cluster.local."}
	for _, on := range []bool{true, false} {
		ex := &fakeExchanger{}
		ex.set(nxdomain(t))
		clk := &clock{t: time.Unix(1e9, 0)}
		cfg := DefaultConfig()
		cfg.DenyBelowNXDOMAIN = on
		r, set := newResolver(t, cfg, ex, clk)
		walk := func(name string) (hits int, ttls []uint32) {
			for _, q := range append(slices.Clone(tries), ".") {
				resp, hit := serve(t, r, pack(t, name+q, dns.TypeA, nil), server.UDP)
				m := unpack(t, resp)
				if m.Rcode != dns.RcodeNameError || m.Question[0].Name != name+q || len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
					t.Fatalf("%s%s: answer %v", name, q, m)
				}
				if hit && q != "." {
					hits++
				}
				ttls = append(ttls, m.Ns[0].Header().Ttl)
				r.wg.Wait()
			}
			return hits, ttls
		}
		walk("rnd1.Example.net")
		before := ex.ncalls()
		clk.Advance(2 * time.Second)
		hits, ttls := walk("Rnd2.example.net")
		var asked []string
		for _, m := range ex.calls[before:] {
			asked = append(asked, m.Question[0].Name)
		}
		denied := metricstest.Value(t, set, "nodedns_denied_below_nxdomain_total")
		if !on {
			// The first try's miss prefetched the other two.
			if hits != 2 || len(asked) != 4 || denied != 0 {
				t.Errorf("off: %d tries answered by the cache, backend asked %q, %v denied below; want 2, the four names, 0", hits, asked, denied)
			}
			continue
		}
		if hits != 3 || !slices.Equal(asked, []string{"rnd2.example.net."}) || denied != 3 {
			t.Errorf("on: %d tries answered by the cache, backend asked %q, %v denied below; want 3, only rnd2.example.net., 3", hits, asked, denied)
		}
		// The cuts were stored 2s ago with a negative TTL of 5s.
		if want := []uint32{3, 3, 3}; !slices.Equal(ttls[:3], want) {
			t.Errorf("on: SOA TTLs of the denied tries %v, want %v (the cuts' remaining)", ttls[:3], want)
		}
		// A denial costs what a hit costs: no allocation.
		req, out := pack(t, "rnd9.example.net.svc.cluster.local.", dns.TypeA, nil), buf()
		if n := testing.AllocsPerRun(100, func() {
			if _, ok := r.ServeFast(out, req, server.UDP); !ok {
				t.Fatal("denial below the cut not answered by ServeFast")
			}
		}); n != 0 {
			t.Errorf("on: a denial below a cut allocates %v times", n)
		}
		// Once the cuts expire, the tries are the backend's again.
		clk.Advance(4 * time.Second)
		if _, hit := serve(t, r, pack(t, "rnd3.example.net.team-a.svc.cluster.local.", dns.TypeA, nil), server.UDP); hit {
			t.Error("on: a try answered from an expired cut")
		}
		r.wg.Wait()
	}
}

// TestDenyBelowNXDOMAINLevels: only the three levels at which the
// kubernetes plugin keeps RFC 8020 deny the names under them. An NXDOMAIN
// under a Service, where the plugin does not keep it (_tcp.web.NS.svc.DOMAIN
// NXDOMAIN, _http._tcp.web.NS.svc.DOMAIN an SRV record), denies nothing;
// nor does an NXDOMAIN of another type or with other flags, or one outside
// the cluster domain.
func TestDenyBelowNXDOMAINLevels(t *testing.T) {
	srv := records(t, dns.RcodeSuccess, "_http._tcp.web.team-a.svc.cluster.local. 5 IN SRV 0 100 80 web.team-a.svc.cluster.local.")
	zone := rfc8020Zone(t, "web.team-a.svc.cluster.local.")
	ex := &fakeExchanger{}
	ex.set(func(m *dns.Msg) (*dns.Msg, error) {
		if m.Question[0].Name == "_http._tcp.web.team-a.svc.cluster.local." {
			return srv(m)
		}
		return zone(m)
	})
	r, _ := newResolver(t, DefaultConfig(), ex, &clock{t: time.Unix(1e9, 0)})
	do := func(m *dns.Msg) { m.SetEdns0(1232, true) }
	for _, name := range []string{"_tcp.web.team-a.svc.cluster.local.", "nosuch.team-a.svc.cluster.local.", "example.com."} {
		serve(t, r, pack(t, name, dns.TypeSRV, nil), server.UDP)
		serve(t, r, pack(t, name, dns.TypeA, nil), server.UDP)
	}
	r.wg.Wait()
	for _, tt := range []struct {
		name  string
		qtype uint16
		edit  func(*dns.Msg)
		hit   bool
	}{
		{"_http._tcp.web.team-a.svc.cluster.local.", dns.TypeSRV, nil, false}, // below a Service
		{"x.nosuch.team-a.svc.cluster.local.", dns.TypeA, nil, true},
		{"x.nosuch.team-a.svc.cluster.local.", dns.TypeAAAA, nil, false}, // the cut is cached for A only
		{"y.nosuch.team-a.svc.cluster.local.", dns.TypeA, do, false},     // and without DO
		{"www.example.com.", dns.TypeA, nil, false},                      // outside the cluster domain
	} {
		before := ex.ncalls()
		resp, hit := serve(t, r, pack(t, tt.name, tt.qtype, tt.edit), server.UDP)
		r.wg.Wait()
		if hit != tt.hit {
			t.Errorf("%s %s: answered by the cache %v, want %v", tt.name, dns.TypeToString[tt.qtype], hit, tt.hit)
		}
		if m := unpack(t, resp); tt.qtype == dns.TypeSRV && (m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1) {
			t.Errorf("%s SRV: answer %v, want the backend's SRV record", tt.name, m)
		}
		if !tt.hit && ex.ncalls() == before {
			t.Errorf("%s %s: backend not asked", tt.name, dns.TypeToString[tt.qtype])
		}
	}
}
