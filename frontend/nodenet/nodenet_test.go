package nodenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/shared/metrics"
	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

func ips(t *testing.T, s string) []net.IP {
	t.Helper()
	v, err := ParseIPs(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type rig struct {
	m    *Manager
	nl   *fakeNetlink
	v4   *fakeIPTables
	v6   *fakeIPTables
	set  *vm.Set
	logs *observer.ObservedLogs
}

func newRig(t *testing.T, cfg Config, nl *fakeNetlink) *rig {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	r := &rig{nl: nl, v4: newFakeIPTables(), v6: newFakeIPTables(), set: metrics.NewSet(), logs: logs}
	if nl == nil {
		r.nl = newFakeNetlink()
	}
	m, err := New(cfg, zap.New(core), r.set, r.nl, map[Family]IPTables{IPv4: r.v4, IPv6: r.v6})
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	return r
}

func dualStack(t *testing.T) Config {
	return Config{
		Mode:       ModeIPTables,
		LocalIPs:   ips(t, "169.254.20.10,fd00:10::10"),
		ServiceIPs: ips(t, "10.96.0.10,fd00:96::a"),
		HealthPort: 9254,
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"iptables needs service ip", Config{}, "needs --service-ip"},
		{"link-local defaults", Config{Mode: ModeLinkLocal}, ""},
		{"bad mode", Config{Mode: "ipvs"}, "want iptables"},
		{"node-ip with link-local", Config{Mode: ModeNodeIP}, "node IP"},
		{"node-ip", Config{Mode: ModeNodeIP, LocalIPs: ips(t, "10.0.0.5")}, ""},
		{"node-ip with ClusterIP", Config{Mode: ModeNodeIP, LocalIPs: ips(t, "10.0.0.5"), ServiceIPs: ips(t, "10.96.0.10")}, ""},
		{"node-ip, ClusterIP is node IP", Config{Mode: ModeNodeIP, LocalIPs: ips(t, "10.0.0.5"), ServiceIPs: ips(t, "10.0.0.5")}, "both the node IP"},
		{"node-ip without link, long name", Config{Mode: ModeNodeIP, LocalIPs: ips(t, "10.0.0.5"), Interface: "a-very-long-name-x"}, ""},
		{"node-ip with ClusterIP, long name", Config{Mode: ModeNodeIP, LocalIPs: ips(t, "10.0.0.5"), ServiceIPs: ips(t, "10.96.0.10"), Interface: "a-very-long-name-x"}, "at most 15"},
		{"loopback", Config{Mode: ModeLinkLocal, LocalIPs: ips(t, "127.0.0.1")}, "cannot be owned"},
		{"long name", Config{Mode: ModeLinkLocal, Interface: "a-very-long-name-x"}, "at most 15"},
		{"fast sync", Config{Mode: ModeLinkLocal, SyncInterval: 1}, "at least 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestRules(t *testing.T) {
	cfg := dualStack(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rules := Rules(cfg)
	// 4 IPs × (2 protocols × 5 rules + 2 health rules).
	if got, want := len(rules), 4*12; got != want {
		t.Fatalf("%d rules, want %d", got, want)
	}
	seen := map[string]bool{}
	for _, r := range rules {
		id := fmt.Sprint(r.key(), r.Comment)
		if seen[id] {
			t.Errorf("comment %q not unique in %v", r.Comment, r.key())
		}
		seen[id] = true
		if !strings.HasPrefix(r.Comment, CommentPrefix) {
			t.Errorf("comment %q lacks the tag", r.Comment)
		}
		if r.Table == "raw" && r.Spec[len(r.Spec)-1] != "NOTRACK" || r.Table == "filter" && r.Spec[len(r.Spec)-1] != "ACCEPT" {
			t.Errorf("%s: wrong target", r)
		}
		if (r.Family == IPv6) != strings.Contains(r.Spec[1], ":") {
			t.Errorf("%s: family does not match address", r)
		}
	}
	want := "-d 10.96.0.10 -p udp --dport 53 -m comment --comment nodedns: notrack udp to 10.96.0.10:53 -j NOTRACK"
	found := false
	for _, r := range rules {
		if r.Table == "raw" && r.Chain == "PREROUTING" && strings.Join(r.Spec, " ") == want {
			found = true
		}
	}
	if !found {
		t.Errorf("no raw PREROUTING rule %q", want)
	}
	// Each chain's rules form one block.
	var order []chainKey
	for _, r := range rules {
		if len(order) == 0 || order[len(order)-1] != r.key() {
			if slices.Contains(order, r.key()) {
				t.Fatalf("chain %v split", r.key())
			}
			order = append(order, r.key())
		}
	}
}

func TestRulesByMode(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string // owned addresses
	}{
		{Config{Mode: ModeIPTables, ServiceIPs: ips(t, "10.96.0.10")}, []string{"169.254.20.10", "10.96.0.10"}},
		{Config{Mode: ModeLinkLocal, ServiceIPs: ips(t, "10.96.0.10")}, []string{"169.254.20.10"}},
		{Config{Mode: ModeNodeIP, LocalIPs: ips(t, "192.168.1.7")}, []string{"192.168.1.7"}},
		{Config{Mode: ModeNodeIP, LocalIPs: ips(t, "192.168.1.7"), ServiceIPs: ips(t, "10.96.0.10")}, []string{"192.168.1.7", "10.96.0.10"}},
	} {
		t.Run(string(tc.cfg.Mode)+"/"+strings.Join(tc.want, ","), func(t *testing.T) {
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ip := range tc.cfg.OwnedIPs() {
				got = append(got, ip.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("owned %v, want %v", got, tc.want)
			}
			if n := len(Rules(tc.cfg)); n != 10*len(tc.want) {
				t.Fatalf("%d rules, want %d", n, 10*len(tc.want))
			}
		})
	}
}

func wantComments(cfg Config, f Family, table, chain string) []string {
	var out []string
	for _, r := range Rules(cfg) {
		if r.Family == f && r.Table == table && r.Chain == chain {
			out = append(out, r.Comment)
		}
	}
	return out
}

func TestSyncInstallsAtTopAndIsIdempotent(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	// A host firewall and kube-proxy were there first.
	r.v4.chains["filter/INPUT"] = [][]string{{"-j", "KUBE-FIREWALL"}, {"-p", "udp", "-j", "DROP"}}
	r.v4.chains["raw/PREROUTING"] = [][]string{{"-j", "CT", "--notrack"}}
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := r.m.Config()
	for _, f := range []struct {
		fam Family
		ipt *fakeIPTables
	}{{IPv4, r.v4}, {IPv6, r.v6}} {
		for _, c := range managedChains {
			want := wantComments(cfg, f.fam, c.table, c.chain)
			got := f.ipt.comments(c.table, c.chain)
			if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
				t.Errorf("%v %s/%s = %q, want %q first", f.fam, c.table, c.chain, got, want)
			}
		}
	}
	if got := r.v4.comments("filter", "INPUT"); !slices.Equal(got[len(got)-2:], []string{"-", "-"}) {
		t.Errorf("foreign rules not kept after ours: %q", got)
	}
	if ok, detail := r.m.Status(); !ok {
		t.Errorf("Status() = false, %q", detail)
	}
	w4, w6 := r.v4.writes, r.v6.writes
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if r.v4.writes != w4 || r.v6.writes != w6 {
		t.Errorf("second Sync wrote %d+%d rules, want none", r.v4.writes-w4, r.v6.writes-w6)
	}
	if got := r.nl.addrStrings("nodedns"); !slices.Equal(got, []string{"10.96.0.10/32", "169.254.20.10/32", "fd00:10::10/128", "fd00:96::a/128"}) {
		t.Errorf("addresses %v", got)
	}
	for _, a := range r.nl.addrs["nodedns"] {
		if a.Flags&unix.IFA_F_NOPREFIXROUTE == 0 {
			t.Errorf("%v without noprefixroute", a.IPNet)
		}
	}
	if !r.nl.up["nodedns"] {
		t.Error("link not set up")
	}
}

func TestSyncRepairsDrift(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want := r.v4.comments("raw", "OUTPUT")
	// Someone deletes one rule, inserts a rule above ours and duplicates one.
	k := "raw/OUTPUT"
	r.v4.chains[k] = slices.Delete(r.v4.chains[k], 2, 3)
	r.v4.chains[k] = slices.Insert(r.v4.chains[k], 0, []string{"-j", "KUBE-SOMETHING"})
	r.v4.chains[k] = append(r.v4.chains[k], slices.Clone(r.v4.chains[k][4]))
	// and an address vanishes while a foreign one appears.
	r.nl.addrs["nodedns"] = append(r.nl.addrs["nodedns"][1:], netlink.Addr{IPNet: hostNet(net.ParseIP("192.0.2.1"))})
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := r.v4.comments("raw", "OUTPUT")
	if !slices.Equal(got, append(slices.Clone(want), "-")) {
		t.Errorf("raw OUTPUT after repair = %q\nwant %q then the foreign rule", got, want)
	}
	if got := r.nl.addrStrings("nodedns"); len(got) != 4 || slices.Contains(got, "192.0.2.1/32") {
		t.Errorf("addresses after repair %v", got)
	}
}

func TestSyncRemovesStaleRules(t *testing.T) {
	// A crashed instance owned another ClusterIP.
	old := dualStack(t)
	old.ServiceIPs = ips(t, "10.96.0.99")
	r := newRig(t, old, nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r.v4.chains["filter/INPUT"] = append(r.v4.chains["filter/INPUT"], []string{"-j", "DROP"})
	r2 := newRig(t, dualStack(t), r.nl)
	r2.v4, r2.v6 = r.v4, r.v6
	r2.m.ipt = map[Family]IPTables{IPv4: r.v4, IPv6: r.v6}
	if err := r2.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range managedChains {
		for _, comment := range r.v4.comments(c.table, c.chain) {
			if strings.Contains(comment, "10.96.0.99") {
				t.Errorf("stale rule %q left in %s/%s", comment, c.table, c.chain)
			}
		}
	}
	if got := r.v4.comments("filter", "INPUT"); got[len(got)-1] != "-" {
		t.Errorf("foreign rule removed: %q", got)
	}
	if n := len(r2.logs.FilterMessage("removed stale rule").All()); n != 12 {
		t.Errorf("%d stale rules removed, want 12 (10 DNS + 2 health)", n)
	}
}

func TestTeardown(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r.v4.chains["filter/INPUT"] = append(r.v4.chains["filter/INPUT"], []string{"-j", "DROP"})
	if err := r.m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ipt := range []*fakeIPTables{r.v4, r.v6} {
		for k, rules := range ipt.chains {
			for _, spec := range rules {
				if strings.Contains(strings.Join(spec, " "), CommentPrefix) {
					t.Errorf("%s: rule %q left", k, spec)
				}
			}
		}
	}
	if len(r.v4.chains["filter/INPUT"]) != 1 {
		t.Errorf("foreign rule removed")
	}
	if _, ok := r.nl.links["nodedns"]; ok {
		t.Error("link left")
	}
	if err := r.m.Teardown(ctx); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
}

func TestDummyFallbackToBridge(t *testing.T) {
	nl := newFakeNetlink()
	nl.noDummy = true
	r := newRig(t, dualStack(t), nl)
	ctx := context.Background()
	for range 3 {
		if err := r.m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		delete(nl.links, "nodedns") // force re-creation
	}
	if _, err := nl.LinkByName("nodedns"); err == nil {
		t.Fatal("link still there")
	}
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if l := nl.links["nodedns"]; l == nil || l.Type() != "bridge" {
		t.Fatalf("link = %v, want a bridge", l)
	}
	if n := r.logs.FilterMessageSnippet("no dummy link type").Len(); n != 1 {
		t.Errorf("fallback logged %d times, want once", n)
	}
}

func TestDummyPath(t *testing.T) {
	r := newRig(t, Config{Mode: ModeLinkLocal}, nil)
	if err := r.m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := r.nl.links["nodedns"]; l == nil || l.Type() != "dummy" {
		t.Fatalf("link = %v, want a dummy", l)
	}
}

func TestForeignLinkRefused(t *testing.T) {
	nl := newFakeNetlink()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "nodedns"
	nl.links["nodedns"] = &netlink.Veth{LinkAttrs: attrs}
	r := newRig(t, Config{Mode: ModeLinkLocal}, nl)
	err := r.m.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not created by nodedns") {
		t.Fatalf("Sync() = %v", err)
	}
	if got := metricstest.Value(t, r.set, "nodedns_setup_errors_total", "op", "link"); got != 1 {
		t.Errorf("setup_errors_total{op=link} = %v", got)
	}
	// The rules still went in: one bad step does not block the others.
	if len(r.v4.comments("raw", "PREROUTING")) != 2 {
		t.Error("rules not installed")
	}
}

func TestNodeIPModeRemovesLeftoverLink(t *testing.T) {
	nl := newFakeNetlink()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "nodedns"
	nl.links["nodedns"] = &netlink.Bridge{LinkAttrs: attrs}
	r := newRig(t, Config{Mode: ModeNodeIP, LocalIPs: ips(t, "192.168.1.7")}, nl)
	if err := r.m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(nl.links) != 0 {
		t.Error("leftover link kept in node-ip mode")
	}
	if got := r.v4.comments("raw", "PREROUTING"); len(got) != 2 || !strings.Contains(got[0], "192.168.1.7:53") {
		t.Errorf("raw PREROUTING = %q", got)
	}
}

// TestNodeIPModeOwnsClusterIP: with ServiceIPs, node-ip mode puts the
// ClusterIP, and only it, on the interface (the node IP is local already),
// with the rules for both; a node IP left there by another configuration
// goes; Teardown removes the rules and the interface.
func TestNodeIPModeOwnsClusterIP(t *testing.T) {
	nl := newFakeNetlink()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "nodedns"
	nl.links["nodedns"] = &netlink.Dummy{LinkAttrs: attrs}
	nl.addrs["nodedns"] = []netlink.Addr{{IPNet: hostNet(net.ParseIP("169.254.20.10").To4())}}
	r := newRig(t, Config{Mode: ModeNodeIP, LocalIPs: ips(t, "192.168.1.7"), ServiceIPs: ips(t, "10.96.0.10")}, nl)
	if err := r.m.RemoveStale(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(nl.addrs["nodedns"]) != 0 {
		t.Errorf("RemoveStale left %v on the link", nl.addrs["nodedns"])
	}
	if err := r.m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, a := range nl.addrs["nodedns"] {
		held = append(held, a.IPNet.String())
	}
	if !slices.Equal(held, []string{"10.96.0.10/32"}) || !nl.up["nodedns"] {
		t.Errorf("link holds %v (up %v), want 10.96.0.10/32 only, up", held, nl.up["nodedns"])
	}
	got := r.v4.comments("raw", "PREROUTING")
	if len(got) != 4 || !strings.Contains(strings.Join(got, " "), "192.168.1.7:53") || !strings.Contains(strings.Join(got, " "), "10.96.0.10:53") {
		t.Errorf("raw PREROUTING = %q, want NOTRACK of udp and tcp to both addresses", got)
	}
	if err := r.m.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(nl.links) != 0 {
		t.Error("Teardown left the link")
	}
	if got := r.v4.comments("raw", "PREROUTING"); len(got) != 0 {
		t.Errorf("Teardown left raw PREROUTING %q", got)
	}
}

func TestSetupErrorsCounted(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	r.v6.failOn = "fd00:96::a"
	err := r.m.Sync(context.Background())
	if err == nil {
		t.Fatal("Sync() = nil with a failing ip6tables")
	}
	if ok, detail := r.m.Status(); ok || !strings.Contains(detail, "fake failure") {
		t.Errorf("Status() = %v, %q", ok, detail)
	}
	if got := metricstest.Value(t, r.set, "nodedns_setup_errors_total", "op", "rules"); got != 1 {
		t.Errorf("setup_errors_total{op=rules} = %v, want 1", got)
	}
	if r.logs.FilterMessage("node network setup").Len() != 1 {
		t.Error("error not logged")
	}
	// The IPv4 rules are complete anyway.
	if n := len(r.v4.comments("raw", "OUTPUT")); n != 2*2*2+2*2 {
		t.Errorf("%d raw OUTPUT rules", n)
	}
}

func TestIsNotSupported(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{unix.EOPNOTSUPP, true},
		{syscall.Errno(unix.EOPNOTSUPP), true},
		{fmt.Errorf("add link: %w", unix.EOPNOTSUPP), true},
		{unix.EPERM, false},
		{errors.New("operation not supported"), false},
		{nil, false},
	} {
		if got := isNotSupported(tc.err); got != tc.want {
			t.Errorf("isNotSupported(%v) = %v", tc.err, got)
		}
	}
}

func TestDetectBackend(t *testing.T) {
	const kube = ":KUBE-IPTABLES-HINT - [0:0]\n-A INPUT -j KUBE-FIREWALL\n"
	const ours = "-A INPUT -d 1.2.3.4 -m comment --comment \"nodedns: x\" -j ACCEPT\n"
	many := strings.Repeat("-A FORWARD -j ACCEPT\n", 5)
	for _, tc := range []struct {
		name        string
		nft, legacy string
		want        Backend
	}{
		{"empty: nft", "", "", BackendNFT},
		{"hint in legacy beats more nft rules", many, kube, BackendLegacy},
		{"hint in nft", kube, many, BackendNFT},
		{"more legacy rules", "-A X -j Y\n", many, BackendLegacy},
		{"own rules do not count", "", ours + ours, BackendNFT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(_ context.Context, name string, _ ...string) ([]byte, error) {
				switch name {
				case "iptables-nft-save":
					return []byte(tc.nft), nil
				case "iptables-legacy-save":
					return []byte(tc.legacy), nil
				}
				return nil, errors.New("not found")
			}
			got, stats := DetectBackend(context.Background(), run)
			if got != tc.want {
				t.Fatalf("DetectBackend = %s, want %s", got, tc.want)
			}
			if stats[BackendLegacy].Denied || stats[BackendNFT].Denied {
				t.Errorf("a missing save command counted as denied: %+v", stats)
			}
		})
	}
	// Without CAP_NET_RAW iptables-legacy-save fails: its rules are
	// unknown, which the stats say (NewHost logs it).
	denied := func(_ context.Context, name string, _ ...string) ([]byte, error) {
		if strings.HasPrefix(name, "ip") && strings.Contains(name, "legacy") {
			return nil, errors.New("iptables-legacy-save: exit status 1: iptables-save v1.8.9 (legacy): Cannot initialize: Permission denied (you must be root)")
		}
		return nil, nil
	}
	if got, stats := DetectBackend(context.Background(), denied); got != BackendNFT || !stats[BackendLegacy].Denied || stats[BackendNFT].Denied {
		t.Errorf("legacy denied: %s %+v, want nft with legacy denied", got, stats)
	}
}

func TestParseRuleLine(t *testing.T) {
	line := `-A OUTPUT -s 169.254.20.10/32 -p udp -m comment --comment "nodedns: notrack udp from 169.254.20.10:53" -m udp --sport 53 -j NOTRACK`
	chain, spec, err := parseRuleLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if chain != "OUTPUT" || spec[7] != "nodedns: notrack udp from 169.254.20.10:53" || len(spec) != 14 {
		t.Fatalf("parseRuleLine = %q %q", chain, spec)
	}
	if got := ruleComment(line); got != "nodedns: notrack udp from 169.254.20.10:53" {
		t.Errorf("ruleComment = %q", got)
	}
	if got := ruleComment(`-A INPUT -m comment --comment "kubernetes: x" -j ACCEPT`); got != "" {
		t.Errorf("ruleComment(foreign) = %q", got)
	}
	if w, err := splitWords(`a "b \"c\" d" e`); err != nil || !slices.Equal(w, []string{"a", `b "c" d`, "e"}) {
		t.Errorf("splitWords = %q, %v", w, err)
	}
	if _, err := splitWords(`a "b`); err == nil {
		t.Error("unterminated quote accepted")
	}
	if _, _, err := parseRuleLine("-P INPUT ACCEPT"); err == nil {
		t.Error("policy line parsed as a rule")
	}
}

func TestRemoveStale(t *testing.T) {
	old := dualStack(t)
	old.ServiceIPs = ips(t, "10.96.0.99")
	r := newRig(t, old, nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := newRig(t, dualStack(t), r.nl)
	r2.m.ipt = map[Family]IPTables{IPv4: r.v4, IPv6: r.v6}
	if err := r2.m.RemoveStale(ctx); err != nil {
		t.Fatal(err)
	}
	// The wanted rules and addresses stay, the stale ones go, and nothing
	// is installed yet.
	got := r.v4.comments("raw", "PREROUTING")
	if len(got) != 2 || strings.Contains(strings.Join(got, " "), "10.96.0.99") {
		t.Errorf("raw PREROUTING after RemoveStale = %q", got)
	}
	if got := r.nl.addrStrings("nodedns"); !slices.Equal(got, []string{"169.254.20.10/32", "fd00:10::10/128"}) {
		t.Errorf("addresses after RemoveStale = %v", got)
	}
	if ok, _ := r2.m.Status(); ok {
		t.Error("RemoveStale reported the network installed")
	}
}

func TestMetrics(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	for _, op := range []string{"detect", "link", "addr", "rules", "teardown"} {
		if got := metricstest.Value(t, r.set, "nodedns_setup_errors_total", "op", op); got != 0 {
			t.Errorf("setup_errors_total{op=%s} = %v before any sync", op, got)
		}
	}
	if got := metricstest.Value(t, r.set, "nodedns_network_installed"); got != 0 {
		t.Errorf("network_installed = %v before any sync", got)
	}
	if err := r.m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, r.set, "nodedns_network_installed"); got != 1 {
		t.Errorf("network_installed = %v after a good sync", got)
	}
	if err := r.m.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, r.set, "nodedns_network_installed"); got != 0 {
		t.Errorf("network_installed = %v after teardown", got)
	}
}

func TestNilSet(t *testing.T) {
	m, err := New(dualStack(t), zap.NewNop(), nil, newFakeNetlink(), map[Family]IPTables{IPv4: newFakeIPTables(), IPv6: newFakeIPTables()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}
