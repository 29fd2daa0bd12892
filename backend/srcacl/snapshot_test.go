package srcacl

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodesSnapshot(t *testing.T) {
	dir := t.TempDir()
	set := buildSet([]*corev1.Node{{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}},
	}})
	if err := writeSnapshot(dir, set, time.Now()); err != nil {
		t.Fatal(err)
	}
	got, _, err := readSnapshot(dir)
	if err != nil || got == nil {
		t.Fatalf("readSnapshot: %v, %v", got, err)
	}
	if !sameSet(set, got) {
		t.Errorf("read set differs from the written one")
	}
	for a, want := range map[string]bool{"10.244.1.7": true, "fd00:10:244:1::5": true, "192.0.2.10": true, "10.244.2.7": false, "192.0.2.11": false} {
		if got.contains(netip.MustParseAddr(a)) != want {
			t.Errorf("snapshot set contains %s: %v, want %v", a, !want, want)
		}
	}

	// Nodes serves it before the first list, and a corrupt file not at all.
	n := &Nodes{snapshotDir: dir}
	n.loadSnapshot()
	if !n.Contains(netip.MustParseAddr("10.244.1.7")) {
		t.Errorf("the snapshot's pod CIDR is not served before the first list")
	}
	for name, content := range map[string]string{
		"truncated":     `{"version":1,"podCIDRs":["10.244.1.0/24"`,
		"bad prefix":    `{"version":1,"podCIDRs":["10.244.1.7/24"]}`,
		"bad address":   `{"version":1,"addresses":["10.244.1"]}`,
		"other version": `{"version":9}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, SnapshotFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if s, _, err := readSnapshot(dir); err == nil {
			t.Errorf("%s: read %v, want an error", name, s)
		}
		n := &Nodes{snapshotDir: dir}
		n.loadSnapshot()
		if n.Contains(netip.MustParseAddr("10.244.1.7")) {
			t.Errorf("%s: a corrupt snapshot is served", name)
		}
	}
}
