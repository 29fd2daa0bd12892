package nodenet

import (
	"context"
	"testing"
)

// TestQueriesDivertedLast: a sync installs raw PREROUTING (pods' queries
// taken from kube-proxy's DNAT to the frontend) only after the answers'
// path is untracked and accepted, and a teardown removes it first. The
// other order let an untracked query's answer get a conntrack entry that
// clashed with an earlier DNATed query's, and the pod lost the answer.
func TestQueriesDivertedLast(t *testing.T) {
	const divert = "raw/PREROUTING"
	r := newRig(t, dualStack(t), nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ipt := range []*fakeIPTables{r.v4, r.v6} {
		first := -1
		for i, op := range ipt.ops {
			if op == "insert "+divert && first < 0 {
				first = i
			}
			if op != "insert "+divert && first >= 0 {
				t.Fatalf("install: %q after the first %s rule (ops %v)", op, divert, ipt.ops)
			}
		}
		if first < 0 {
			t.Fatalf("install: no %s rule (ops %v)", divert, ipt.ops)
		}
		ipt.ops = nil
	}
	if err := r.m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ipt := range []*fakeIPTables{r.v4, r.v6} {
		seenOther := false
		for _, op := range ipt.ops {
			if op == "delete "+divert && seenOther {
				t.Fatalf("teardown: a %s rule removed after another chain's (ops %v)", divert, ipt.ops)
			}
			if op != "delete "+divert {
				seenOther = true
			}
		}
		if len(ipt.ops) == 0 {
			t.Fatal("teardown removed nothing")
		}
	}
}
