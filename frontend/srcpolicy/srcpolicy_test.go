package srcpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func key(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// fakeRoutes is a routing table in miniature: the addresses reached
// without a gateway; every other address is through one, and "fail" ones
// have no route.
type fakeRoutes struct {
	onLink map[string]bool
	fail   map[string]bool
	asked  map[string]int
}

func (f *fakeRoutes) route(a netip.Addr) (bool, error) {
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[a.String()]++
	if f.fail[a.String()] {
		return false, errors.New("network unreachable")
	}
	return f.onLink[a.String()], nil
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec    []string
		nilPol  bool
		want    string
		wantErr string
	}{
		{spec: nil, nilPol: true},
		{spec: []string{"", " "}, nilPol: true},
		{spec: []string{"local"}, want: "local"},
		{spec: []string{"10.244.0.0/16", "2001:db8:1::/48", "local"}, want: "local,10.244.0.0/16,2001:db8:1::/48"},
		{spec: []string{"10.244.1.7"}, want: "10.244.1.7/32"},
		{spec: []string{"10.244.1.7/16"}, want: "10.244.0.0/16"},
		{spec: []string{"pods"}, wantErr: `"pods": not a CIDR prefix`},
		{spec: []string{"10.0.0.0/33"}, wantErr: "not a CIDR prefix"},
	} {
		p, err := Parse(tc.spec, (&fakeRoutes{}).route)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, want error with %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.spec, err)
			continue
		}
		if (p == nil) != tc.nilPol {
			t.Errorf("Parse(%q) nil=%v, want %v", tc.spec, p == nil, tc.nilPol)
			continue
		}
		if p != nil && p.String() != tc.want {
			t.Errorf("Parse(%q) = %s, want %s", tc.spec, p, tc.want)
		}
	}
	if _, err := Parse([]string{"local"}, nil); err == nil {
		t.Error("local without a router: no error")
	}
}

func TestAllowed(t *testing.T) {
	f := &fakeRoutes{
		onLink: map[string]bool{"10.244.1.7": true, "192.168.1.20": true, "2001:db8:7::5": true},
		fail:   map[string]bool{"203.0.113.66": true},
	}
	p, err := Parse([]string{"local", "100.64.0.0/10"}, f.route)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"127.0.0.1", true},     // loopback, never asked
		{"::1", true},           // loopback, never asked
		{"10.244.1.7", true},    // a pod on the node's bridge
		{"192.168.1.20", true},  // an attached subnet
		{"2001:db8:7::5", true}, // an IPv6 global-unicast pod
		{"100.70.0.1", true},    // a listed prefix, never asked
		{"198.51.100.7", false}, // through a gateway
		{"203.0.113.66", false}, // no route at all
		{"10.244.1.7", true},    // again: from the cache
	} {
		if got := p.Allowed(key(tc.src)); got != tc.want {
			t.Errorf("Allowed(%s) = %v, want %v", tc.src, got, tc.want)
		}
	}
	if f.asked["10.244.1.7"] != 1 {
		t.Errorf("10.244.1.7 looked up %d times, want 1 (cached)", f.asked["10.244.1.7"])
	}
	for _, never := range []string{"127.0.0.1", "::1", "100.70.0.1"} {
		if f.asked[never] != 0 {
			t.Errorf("%s was looked up", never)
		}
	}
	if got := p.Stats().LookupFails.Load(); got != 1 {
		t.Errorf("lookup failures %d, want 1", got)
	}
}

func TestPrefixesOnly(t *testing.T) {
	p, err := Parse([]string{"10.244.0.0/16"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allowed(key("10.244.3.3")) || p.Allowed(key("10.245.0.1")) || !p.Allowed(key("127.0.0.53")) {
		t.Error("a prefix-only policy allows the wrong sources")
	}
	var none *Policy
	if !none.Allowed(key("203.0.113.1")) {
		t.Error("a nil policy refuses")
	}
}

// TestExpiryAndSweep: an answer is kept for the TTL, then asked again; a
// route that changed in between takes effect; Sweep forgets old sources.
func TestExpiryAndSweep(t *testing.T) {
	f := &fakeRoutes{onLink: map[string]bool{"10.244.1.7": true}}
	p, _ := Parse([]string{"local"}, f.route)
	now := int64(1000)
	p.now.Store(now)
	if !p.Allowed(key("10.244.1.7")) {
		t.Fatal("on-link source refused")
	}
	f.onLink["10.244.1.7"] = false // the pod is gone, the address routed elsewhere
	now += p.ttl - 1
	p.now.Store(now)
	if !p.Allowed(key("10.244.1.7")) {
		t.Error("answer not kept for its TTL")
	}
	now += 2
	p.now.Store(now)
	if p.Allowed(key("10.244.1.7")) {
		t.Error("answer kept past its TTL")
	}
	p.Allowed(key("10.1.1.1"))
	if n := p.entries.Load(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	p.now.Store(now + p.ttl)
	p.sweep()
	if n := p.entries.Load(); n != 0 {
		t.Errorf("%d entries after a sweep past the TTL, want 0", n)
	}
}

// TestLookupBudget: a flood of ever new sources costs at most the budget
// of lookups a second and the cache stays bounded.
func TestLookupBudget(t *testing.T) {
	f := &fakeRoutes{}
	p, _ := Parse([]string{"local"}, f.route)
	p.now.Store(5)
	p.maxEntries = 100
	for i := range 2000 {
		p.Allowed(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).As16())
	}
	if got := p.Stats().Lookups.Load(); got != DefaultLookupsPerSecond {
		t.Errorf("%d lookups in one second, want the budget %d", got, DefaultLookupsPerSecond)
	}
	if got := p.Stats().OverBudget.Load(); got != 2000-DefaultLookupsPerSecond {
		t.Errorf("%d refused over budget, want %d", got, 2000-DefaultLookupsPerSecond)
	}
	if n := p.entries.Load(); n > p.maxEntries {
		t.Errorf("%d entries, bound %d", n, p.maxEntries)
	}
	p.now.Store(6)
	f.onLink = map[string]bool{"10.244.9.9": true}
	if !p.Allowed(key("10.244.9.9")) {
		t.Error("the next second's budget did not come")
	}
}

func BenchmarkAllowedCached(b *testing.B) {
	f := &fakeRoutes{onLink: map[string]bool{"10.244.1.7": true}}
	p, _ := Parse([]string{"local"}, f.route)
	k := key("10.244.1.7")
	p.Allowed(k)
	b.ReportAllocs()
	for b.Loop() {
		if !p.Allowed(k) {
			b.Fatal("refused")
		}
	}
}
