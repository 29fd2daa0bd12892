package nodenet

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/metrics"
)

// fakeNFT keeps the release table as rule comments by chain.
type fakeNFT struct {
	chains   map[string][]string // nil: no table
	replaces int                 // whole-table replacements
	swaps    []string            // chains whose rules alone were replaced
	listErr  error
}

func (f *fakeNFT) Release() (map[string][]string, bool, error) {
	if f.listErr != nil {
		return nil, false, f.listErr
	}
	return f.chains, f.chains != nil, nil
}

func (f *fakeNFT) ReplaceRelease(chains []ReleaseChain) error {
	f.replaces++
	f.chains = releaseComments(chains)
	return nil
}

func (f *fakeNFT) DeleteRelease() error {
	f.chains = nil
	return nil
}

func (f *fakeNFT) ReplaceRules(c ReleaseChain) error {
	if _, ok := f.chains[c.Name]; !ok {
		return errors.New("no such chain")
	}
	f.swaps = append(f.swaps, c.Name)
	f.chains[c.Name] = releaseComments([]ReleaseChain{c})[c.Name]
	return nil
}

func newReleaseRig(t *testing.T, cfg Config, nft *fakeNFT) *Manager {
	t.Helper()
	m, err := NewWithNFT(cfg, zap.NewNop(), metrics.NewSet(), newFakeNetlink(),
		map[Family]IPTables{IPv4: newFakeIPTables(), IPv6: newFakeIPTables()}, nft)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func releaseCfg(t *testing.T) Config {
	cfg := dualStack(t)
	cfg.Mode = ModeLinkLocal
	cfg.ReleaseTo = ips(t, "10.96.0.10")
	return cfg
}

func TestReleaseChains(t *testing.T) {
	cfg := releaseCfg(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := releaseComments(ReleaseChains(cfg, false))
	// Only the IPv4 local IP has a release address of its family.
	want := map[string][]string{
		"served": {"served locally: udp to 169.254.20.10:53", "served locally: tcp to 169.254.20.10:53"},
		"prerouting": {"untracked: a frontend serves", "loopback: handled in output", "exemptions",
			"release udp to 169.254.20.10:53 to 10.96.0.10", "release tcp to 169.254.20.10:53 to 10.96.0.10"},
		"output": {"untracked: a frontend serves",
			"local: udp to 169.254.20.10:53", "release udp to 169.254.20.10:53 to 10.96.0.10",
			"local: tcp to 169.254.20.10:53", "release tcp to 169.254.20.10:53 to 10.96.0.10"},
	}
	if !sameComments(got, want) {
		t.Errorf("chains:\n%v\nwant:\n%v", got, want)
	}
	// Released: no exemption for a bound socket, but TCP connections in
	// flight keep going to it.
	rel := releaseComments(ReleaseChains(cfg, true))
	if !slices.Equal(rel["served"], []string{"connected: tcp to 169.254.20.10:53"}) || !slices.Equal(rel["prerouting"], want["prerouting"]) {
		t.Errorf("released: %v", rel)
	}

	// Both families, source prefixes: one rewrite rule per prefix of the
	// local IP's family.
	cfg.ReleaseTo = ips(t, "10.96.0.10,fd00:96::a")
	_, p4, _ := net.ParseCIDR("10.244.0.0/16")
	_, p6, _ := net.ParseCIDR("fd00:244::/48")
	cfg.ReleaseSources = []*net.IPNet{p4, p6}
	var v4, v6 int
	for _, c := range releaseComments(ReleaseChains(cfg, false))["prerouting"] {
		switch {
		case strings.HasPrefix(c, "release") && strings.HasSuffix(c, "10.96.0.10 from 10.244.0.0/16"):
			v4++
		case strings.HasPrefix(c, "release") && strings.HasSuffix(c, "fd00:96::a from fd00:244::/48"):
			v6++
		case strings.HasPrefix(c, "release"):
			t.Errorf("unexpected rule %q", c)
		}
	}
	if v4 != 2 || v6 != 2 {
		t.Errorf("%d IPv4 and %d IPv6 rewrite rules, want 2 and 2 (udp, tcp)", v4, v6)
	}

	cfg.ReleaseTo = nil
	if c := ReleaseChains(cfg, false); c != nil {
		t.Errorf("no ReleaseTo: %v", c)
	}
}

func TestReleaseConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		to, why string
	}{
		{"10.96.0.10,10.96.0.11", "at most one per IP family"},
		{"fd00:10::10", "is a local IP"},
		{"169.254.1.1", "want the kube-dns ClusterIP"},
		{"127.0.0.1", "want the kube-dns ClusterIP"},
	} {
		cfg := releaseCfg(t)
		cfg.ReleaseTo = ips(t, tc.to)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ReleaseTo %s: %v, want %q", tc.to, err, tc.why)
		}
	}
	if _, err := New(releaseCfg(t), zap.NewNop(), nil, newFakeNetlink(), map[Family]IPTables{IPv4: newFakeIPTables(), IPv6: newFakeIPTables()}); err == nil {
		t.Error("New without nftables accepted ReleaseTo")
	}
}

// TestReleaseTableLifecycle: the table appears with RemoveStale, stays
// through Sync unchanged, has its exemptions swapped (not the whole table
// replaced) by Release and back by Teardown, and survives Teardown.
func TestReleaseTableLifecycle(t *testing.T) {
	nft := &fakeNFT{}
	m := newReleaseRig(t, releaseCfg(t), nft)
	ctx := context.Background()
	if err := m.RemoveStale(ctx); err != nil {
		t.Fatal(err)
	}
	if nft.chains == nil || nft.replaces != 1 {
		t.Fatalf("after RemoveStale: %v, %d replaces", nft.chains, nft.replaces)
	}
	for range 3 {
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if nft.replaces != 1 {
		t.Errorf("Sync replaced an unchanged table: %d replaces", nft.replaces)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nft.chains["served"], []string{"connected: tcp to 169.254.20.10:53"}) {
		t.Errorf("after Release: served %v", nft.chains["served"])
	}
	if err := m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if nft.chains == nil {
		t.Fatal("Teardown deleted the table")
	}
	if len(nft.chains["served"]) != 2 || nft.replaces != 1 || !slices.Equal(nft.swaps, []string{"served", "served"}) {
		t.Errorf("after Teardown: served %v, %d replaces, swaps %v", nft.chains["served"], nft.replaces, nft.swaps)
	}

	// Drift (a rule deleted by hand) is repaired by the next Sync.
	nft.chains["prerouting"] = nft.chains["prerouting"][1:]
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if nft.replaces != 2 || nft.chains["prerouting"][0] != "untracked: a frontend serves" {
		t.Errorf("drift not repaired: %v", nft.chains)
	}
}

// TestReleaseTableRemovedWhenNotWanted: a configuration without ReleaseTo
// deletes a table an earlier one left, and does not fail where nftables
// cannot even be listed.
func TestReleaseTableRemovedWhenNotWanted(t *testing.T) {
	nft := &fakeNFT{chains: map[string][]string{"prerouting": {"old"}}}
	cfg := releaseCfg(t)
	cfg.ReleaseTo = nil
	m := newReleaseRig(t, cfg, nft)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if nft.chains != nil {
		t.Errorf("table kept: %v", nft.chains)
	}
	nft.listErr = errors.New("protocol not supported")
	if err := m.Sync(context.Background()); err != nil {
		t.Errorf("Sync without nftables and no table wanted: %v", err)
	}
	m2 := newReleaseRig(t, releaseCfg(t), nft)
	if err := m2.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), ReleaseTable) {
		t.Errorf("Sync with a table wanted and nftables failing: %v", err)
	}
}
