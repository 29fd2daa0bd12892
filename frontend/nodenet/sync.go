package nodenet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// managedChains are the only chains nodedns ever writes to, in the order a
// sync installs their rules. raw PREROUTING, which takes pods' queries away
// from kube-proxy's DNAT and to the frontend, comes last: were it first, the
// answer to such an untracked query would leave (raw OUTPUT not yet
// installed) with a conntrack entry of its own, which clashes with the
// entry of an earlier, DNATed query from the same pod port; the kernel
// then gives the answer another source port and the pod never sees it
// (lookups lost in the real-node migration, docs/studies/2026-12-01-real-node-migrations.md). Removal
// (want empty) runs in the reverse order for the same reason.
var managedChains = []struct{ table, chain string }{
	{"raw", "OUTPUT"},
	{"filter", "INPUT"},
	{"filter", "OUTPUT"},
	{"raw", "PREROUTING"},
}

// syncRules converges every managed chain of every family to want: the
// wanted rules first, in order, and no other nodedns rule. want=nil
// removes every nodedns rule.
func (m *Manager) syncRules(ctx context.Context, want []Rule) error {
	return m.reconcileRules(ctx, want, true)
}

// reconcileRules is syncRules; with install=false it only deletes the
// nodedns rules that want lacks.
func (m *Manager) reconcileRules(ctx context.Context, want []Rule, install bool) error {
	by := map[chainKey][]Rule{}
	for _, r := range want {
		by[r.key()] = append(by[r.key()], r)
	}
	var errs []error
	for _, f := range []Family{IPv4, IPv6} {
		ipt := m.ipt[f]
		if ipt == nil {
			continue
		}
		chains := slices.Clone(managedChains)
		if len(want) == 0 {
			slices.Reverse(chains)
		}
		for _, c := range chains {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := chainKey{f, c.table, c.chain}
			if err := m.syncChain(ipt, k, by[k], install); err != nil {
				errs = append(errs, fmt.Errorf("%s %s/%s: %w", f, c.table, c.chain, err))
			}
		}
	}
	return errors.Join(errs...)
}

// listRules returns the "-A" lines of a chain.
func listRules(ipt IPTables, k chainKey) ([]string, error) {
	lines, err := ipt.List(k.Table, k.Chain)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, l)
		}
	}
	return out, nil
}

func (m *Manager) syncChain(ipt IPTables, k chainKey, want []Rule, install bool) error {
	lines, err := listRules(ipt, k)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	wanted := map[string]bool{}
	for _, r := range want {
		wanted[r.Comment] = true
	}
	// Rules a previous configuration (or a crashed instance) installed.
	var errs []error
	removed := 0
	for _, l := range lines {
		c := ruleComment(l)
		if c == "" || wanted[c] {
			continue
		}
		_, spec, err := parseRuleLine(l)
		if err == nil {
			err = ipt.Delete(k.Table, k.Chain, spec...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete stale rule %q: %w", l, err))
			continue
		}
		removed++
		m.log.Info("removed stale rule", zap.Stringer("family", k.Family), zap.String("table", k.Table),
			zap.String("chain", k.Chain), zap.String("rule", l))
	}
	if len(want) == 0 || !install {
		return errors.Join(errs...)
	}
	if removed > 0 {
		if lines, err = listRules(ipt, k); err != nil {
			return errors.Join(append(errs, fmt.Errorf("list: %w", err))...)
		}
	}
	// The wanted rules must be the first len(want) rules, in order, each
	// once. Walk them against a model of the chain (comments; "" for a
	// foreign rule): a missing rule is inserted at its position, a misplaced
	// or duplicated one is deleted (every copy) and inserted there. Rules
	// already in place are never touched.
	model := make([]string, len(lines))
	for i, l := range lines {
		model[i] = ruleComment(l)
	}
	for i, r := range want {
		copies := 0
		for _, c := range model {
			if c == r.Comment {
				copies++
			}
		}
		if i < len(model) && model[i] == r.Comment && copies == 1 {
			continue
		}
		for n := 0; n < copies; n++ {
			if err := ipt.Delete(k.Table, k.Chain, r.Spec...); err != nil {
				errs = append(errs, fmt.Errorf("delete misplaced %s: %w", r, err))
				break
			}
			j := slices.Index(model, r.Comment)
			model = slices.Delete(model, j, j+1)
		}
		pos := min(i, len(model))
		if err := ipt.Insert(k.Table, k.Chain, pos+1, r.Spec...); err != nil {
			errs = append(errs, fmt.Errorf("insert %s: %w", r, err))
			continue
		}
		model = slices.Insert(model, pos, r.Comment)
		if copies == 0 {
			m.log.Info("installed rule", zap.String("rule", r.String()))
		} else {
			m.log.Info("moved rule to its place", zap.String("rule", r.String()))
		}
	}
	return errors.Join(errs...)
}
