package nodenet

import (
	"context"
	"strings"
	"testing"
)

// TestReleaseRemovesOnlyTheDiversion: Release takes away the rules that
// steer pods' queries to the frontend (raw PREROUTING) and leaves every
// other one, so that the answers of what the frontend still drains leave
// untracked; Teardown then removes the rest.
func TestReleaseRemovesOnlyTheDiversion(t *testing.T) {
	r := newRig(t, dualStack(t), nil)
	ctx := context.Background()
	if err := r.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(ipt *fakeIPTables) (divert, other int) {
		for k, rules := range ipt.chains {
			for _, spec := range rules {
				if !strings.Contains(strings.Join(spec, " "), CommentPrefix) {
					continue
				}
				if k == "raw/PREROUTING" {
					divert++
				} else {
					other++
				}
			}
		}
		return divert, other
	}
	var before [2]int
	for i, ipt := range []*fakeIPTables{r.v4, r.v6} {
		d, o := count(ipt)
		if d == 0 || o == 0 {
			t.Fatalf("after Sync: %d raw/PREROUTING and %d other nodedns rules, want both", d, o)
		}
		before[i] = o
	}
	if err := r.m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ipt := range []*fakeIPTables{r.v4, r.v6} {
		if d, o := count(ipt); d != 0 || o != before[i] {
			t.Errorf("after Release: %d raw/PREROUTING rules (want 0) and %d others (want %d)", d, o, before[i])
		}
	}
	if err := r.m.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ipt := range []*fakeIPTables{r.v4, r.v6} {
		if d, o := count(ipt); d+o != 0 {
			t.Errorf("after Teardown: %d nodedns rules left", d+o)
		}
	}
}
