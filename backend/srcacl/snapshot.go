package srcacl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodedns/nodedns/backend/internal/atomicfile"
)

// SnapshotFile is the Node set's snapshot in the snapshot directory: the
// networks of the last list of Nodes, written when they change, read at
// start so that a backend starting with no API server answers the pods
// of other nodes (their pod CIDRs) as before, until the first list.
const SnapshotFile = "nodes-snapshot.json"

const (
	// maxSnapshotBytes bounds the file read and written: some 200,000
	// nodes' networks.
	maxSnapshotBytes = 16 << 20
	snapshotVersion  = 1
)

type nodesSnapshot struct {
	Version   int       `json:"version"`
	Written   time.Time `json:"written"`
	Nodes     int       `json:"nodes"`
	PodCIDRs  []string  `json:"podCIDRs"`
	Addresses []string  `json:"addresses"`
}

// lists returns s's networks, sorted.
func (s *netSet) lists() (cidrs, addrs []string) {
	for p := range s.cidrs {
		cidrs = append(cidrs, p.String())
	}
	for a := range s.addrs {
		addrs = append(addrs, a.String())
	}
	slices.Sort(cidrs)
	slices.Sort(addrs)
	return cidrs, addrs
}

// writeSnapshot writes s to dir atomically (a temporary file renamed).
func writeSnapshot(dir string, s *netSet, now time.Time) error {
	cidrs, addrs := s.lists()
	b, err := json.Marshal(nodesSnapshot{Version: snapshotVersion, Written: now.UTC(), Nodes: s.nodes, PodCIDRs: cidrs, Addresses: addrs})
	if err != nil {
		return err
	}
	return atomicfile.Write(dir, SnapshotFile, b, maxSnapshotBytes)
}

// readSnapshot reads dir's snapshot into a set; a missing file is
// (nil, zero, nil). A malformed network makes the whole file corrupt.
func readSnapshot(dir string) (*netSet, time.Time, error) {
	f, err := os.Open(filepath.Join(dir, SnapshotFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSnapshotBytes+1))
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(b) > maxSnapshotBytes {
		return nil, time.Time{}, fmt.Errorf("larger than the limit of %d bytes", maxSnapshotBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var ns nodesSnapshot
	if err := d.Decode(&ns); err != nil {
		return nil, time.Time{}, fmt.Errorf("corrupt: %w", err)
	}
	if ns.Version != snapshotVersion {
		return nil, time.Time{}, fmt.Errorf("version %d, want %d", ns.Version, snapshotVersion)
	}
	s := &netSet{addrs: map[netip.Addr]struct{}{}, cidrs: map[netip.Prefix]struct{}{}, nodes: ns.Nodes}
	seenBits := map[int]bool{}
	for _, c := range ns.PodCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p != p.Masked() {
			return nil, time.Time{}, fmt.Errorf("corrupt: pod CIDR %q", c)
		}
		s.cidrs[p] = struct{}{}
		if !seenBits[p.Bits()] {
			seenBits[p.Bits()] = true
			s.bits = append(s.bits, p.Bits())
		}
	}
	s.podCIDRs = len(s.cidrs)
	for _, a := range ns.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("corrupt: address %q", a)
		}
		s.addrs[ip] = struct{}{}
	}
	return s, ns.Written, nil
}

// sameSet reports whether a and b hold the same networks.
func sameSet(a, b *netSet) bool {
	if a == nil || b == nil {
		return a == b
	}
	ac, aa := a.lists()
	bc, ba := b.lists()
	return a.nodes == b.nodes && slices.Equal(ac, bc) && slices.Equal(aa, ba)
}
