package srcacl

import (
	"context"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// netSet is the cluster's networks as the Node objects list them: every
// node's spec.podCIDRs and every address in its status.addresses.
type netSet struct {
	addrs map[netip.Addr]struct{}
	// cidrs by prefix length: an address is looked up once per distinct
	// length (one or two in a cluster), not once per node.
	cidrs map[netip.Prefix]struct{}
	bits  []int
	// counted for the log and the gauge
	nodes, podCIDRs int
}

func (s *netSet) contains(a netip.Addr) bool {
	if s == nil {
		return false
	}
	if _, ok := s.addrs[a]; ok {
		return true
	}
	for _, b := range s.bits {
		if b > a.BitLen() {
			continue
		}
		if p, err := a.Prefix(b); err == nil {
			if _, ok := s.cidrs[p]; ok {
				return true
			}
		}
	}
	return false
}

// buildSet reads the networks of nodes. A malformed field is skipped: one
// node's bad data must not refuse the others.
func buildSet(nodes []*corev1.Node) *netSet {
	s := &netSet{addrs: map[netip.Addr]struct{}{}, cidrs: map[netip.Prefix]struct{}{}, nodes: len(nodes)}
	seenBits := map[int]bool{}
	for _, n := range nodes {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			p = p.Masked()
			if p.Addr().Is4In6() {
				continue
			}
			if _, dup := s.cidrs[p]; !dup {
				s.podCIDRs++
			}
			s.cidrs[p] = struct{}{}
			if !seenBits[p.Bits()] {
				seenBits[p.Bits()] = true
				s.bits = append(s.bits, p.Bits())
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				s.addrs[ip.Unmap()] = struct{}{}
			}
		}
	}
	return s
}

// Nodes keeps the cluster's networks from a watch of the Node objects.
type Nodes struct {
	client clientset.Interface
	set    atomic.Pointer[netSet]
	synced atomic.Bool
	dirty  atomic.Bool
	// onChange is told each rebuilt set's counts (the log and the gauge).
	onChange func(nodes, podCIDRs, addrs int)
	// snapshotDir keeps the set's snapshot (snapshot.go); "": none.
	snapshotDir string
	written     bool // a snapshot has been written by this process (rebuild's goroutine only)
}

// NewNodes returns a Nodes reading through client; Run starts it.
func NewNodes(client clientset.Interface) *Nodes {
	return &Nodes{client: client}
}

// Contains reports whether a is a node's address or in a node's pod CIDR.
func (n *Nodes) Contains(a netip.Addr) bool { return n.set.Load().contains(a) }

// Synced reports whether the first list of Nodes has been read.
func (n *Nodes) Synced() bool { return n.synced.Load() }

// slim keeps of a Node what the set needs: a watch of every Node object
// holds status fields (images, conditions) a hundred times larger.
func slim(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	s := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: n.Namespace, UID: n.UID, ResourceVersion: n.ResourceVersion}}
	s.Spec.PodCIDR = n.Spec.PodCIDR
	s.Spec.PodCIDRs = n.Spec.PodCIDRs
	s.Status.Addresses = n.Status.Addresses
	return s, nil
}

// Run watches the Nodes until ctx ends. Changes are applied at most once
// every interval: kubelets report their Node's status every few minutes,
// and each report of each node is an event here.
func (n *Nodes) Run(ctx context.Context, interval time.Duration) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return n.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return n.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	// The wrapper says whether the client streams its lists (WatchList);
	// the informer falls back to a plain list where it does not.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, n.client), &corev1.Node{}, 0, cache.Indexers{})
	_ = inf.SetTransform(slim)
	mark := func(any) { n.dirty.Store(true) }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    mark,
		UpdateFunc: func(_, o any) { mark(o) },
		DeleteFunc: mark,
	})
	n.loadSnapshot()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	n.rebuild(inf.GetStore())
	n.synced.Store(true)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n.dirty.Load() {
				n.rebuild(inf.GetStore())
			}
		}
	}
}

func (n *Nodes) rebuild(store cache.Store) {
	n.dirty.Store(false)
	var nodes []*corev1.Node
	for _, o := range store.List() {
		if nd, ok := o.(*corev1.Node); ok {
			nodes = append(nodes, nd)
		}
	}
	s := buildSet(nodes)
	old := n.set.Swap(s)
	if n.onChange != nil {
		n.onChange(s.nodes, s.podCIDRs, len(s.addrs))
	}
	if n.snapshotDir != "" && (!n.written || !sameSet(old, s)) {
		if err := writeSnapshot(n.snapshotDir, s, time.Now()); err != nil {
			log.Warningf("%s: snapshot in %s: %v", NodesWord, n.snapshotDir, err)
		}
		n.written = true
	}
}

// loadSnapshot serves the snapshot's networks until the first list of
// Nodes replaces them: a backend starting with no API server answers the
// pods of other nodes as the last list did, not REFUSED. A snapshot that
// cannot be read is ignored, with a log line.
func (n *Nodes) loadSnapshot() {
	if n.snapshotDir == "" {
		return
	}
	s, written, err := readSnapshot(n.snapshotDir)
	switch {
	case err != nil:
		log.Warningf("%s: snapshot %s ignored: %v", NodesWord, filepath.Join(n.snapshotDir, SnapshotFile), err)
	case s != nil:
		n.set.CompareAndSwap(nil, s)
		log.Infof("%s: until the first list of Nodes, the snapshot of %s: %d nodes, %d pod CIDRs, %d node addresses",
			NodesWord, written.Format(time.RFC3339), s.nodes, s.podCIDRs, len(s.addrs))
	}
}
