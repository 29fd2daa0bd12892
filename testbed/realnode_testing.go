package testbed

import (
	"context"
	"testing"
)

// StartRealNodesForTest starts a testbed with the controllers and a real
// node for each of names, each with archives imported, skipping t with the
// reason when real nodes cannot run here. Stop runs in t.Cleanup (see
// StartForTest), which on failure logs every daemon's log tail first.
func StartRealNodesForTest(t testing.TB, names []string, archives []Archive) (*Testbed, []*RealNode) {
	t.Helper()
	return StartRealNodesForTestWith(t, names, RealNodeOptions{Images: archives})
}

// StartRealNodesForTestWith is StartRealNodesForTest with every node
// started with opts.
func StartRealNodesForTestWith(t testing.TB, names []string, opts RealNodeOptions) (*Testbed, []*RealNode) {
	t.Helper()
	if r := RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if err := RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	tb := StartForTest(t, Options{DualStack: opts.DualStack})
	ctx := context.Background()
	if err := tb.StartControllers(ctx); err != nil {
		t.Fatal(err)
	}
	var nodes []*RealNode
	for _, name := range names {
		n, err := tb.AddRealNode(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return tb, nodes
}
