package debian

import (
	"fmt"
	"sort"
	"strings"
)

// Resolve returns roots and everything they depend on (Depends and
// Pre-Depends, transitively) in index, sorted by name. For "a | b" the
// first alternative the index holds, as a package or through Provides, is
// taken. A clause naming a package in exclude is dropped entirely: those
// serve maintainer scripts or a package manager (awk for base-files'
// postinst, debconf, perl), which an image does not run. Version
// constraints are not checked: one suite's index satisfies its own.
func Resolve(index map[string]Package, roots []string, exclude map[string]bool) ([]Package, error) {
	providers := map[string][]string{}
	for name, p := range index {
		for _, v := range p.Provides {
			providers[v] = append(providers[v], name)
		}
	}
	for _, v := range providers {
		sort.Strings(v)
	}
	pick := func(name string) (string, bool) {
		if _, ok := index[name]; ok {
			return name, true
		}
		if ps := providers[name]; len(ps) > 0 {
			return ps[0], true
		}
		return "", false
	}

	chosen := map[string]bool{}
	var visit func(name, from string) error
	visit = func(name, from string) error {
		if chosen[name] {
			return nil
		}
		p, ok := index[name]
		if !ok {
			return fmt.Errorf("resolve: %s (needed by %s) is not in the index", name, from)
		}
		chosen[name] = true
		for _, clause := range parseRelations(p.PreDepends + ", " + p.Depends) {
			if excluded(clause, exclude) {
				continue
			}
			var dep string
			for _, alt := range clause {
				if n, ok := pick(alt); ok {
					dep = n
					break
				}
			}
			if dep == "" {
				return fmt.Errorf("resolve: no package in the index satisfies %q (needed by %s)", strings.Join(clause, " | "), name)
			}
			if err := visit(dep, name); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range roots {
		if err := visit(r, "the image"); err != nil {
			return nil, err
		}
	}
	out := make([]Package, 0, len(chosen))
	for n := range chosen {
		out = append(out, index[n])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func excluded(clause []string, exclude map[string]bool) bool {
	for _, alt := range clause {
		if exclude[alt] {
			return true
		}
	}
	return false
}
