package nodenet

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fakeIPTables keeps chains as rulespecs and renders them like iptables -S.
type fakeIPTables struct {
	chains map[string][][]string // "table/chain" -> rules
	writes int
	ops    []string // "insert table/chain" or "delete table/chain", in call order
	failOn string   // Insert fails when the spec contains this
}

func newFakeIPTables() *fakeIPTables { return &fakeIPTables{chains: map[string][][]string{}} }

func (f *fakeIPTables) find(table, chain string, spec []string) int {
	for i, r := range f.chains[table+"/"+chain] {
		if slices.Equal(r, spec) {
			return i
		}
	}
	return -1
}

func (f *fakeIPTables) Exists(table, chain string, spec ...string) (bool, error) {
	return f.find(table, chain, spec) >= 0, nil
}

func (f *fakeIPTables) Insert(table, chain string, pos int, spec ...string) error {
	if f.failOn != "" && strings.Contains(strings.Join(spec, " "), f.failOn) {
		return errors.New("iptables: fake failure")
	}
	k := table + "/" + chain
	if pos < 1 || pos > len(f.chains[k])+1 {
		return fmt.Errorf("index of insertion too big: %d", pos)
	}
	f.writes++
	f.ops = append(f.ops, "insert "+k)
	f.chains[k] = slices.Insert(f.chains[k], pos-1, slices.Clone(spec))
	return nil
}

func (f *fakeIPTables) Delete(table, chain string, spec ...string) error {
	i := f.find(table, chain, spec)
	if i < 0 {
		return errors.New("iptables: Bad rule (does a matching rule exist in that chain?)")
	}
	f.writes++
	k := table + "/" + chain
	f.ops = append(f.ops, "delete "+k)
	f.chains[k] = slices.Delete(f.chains[k], i, i+1)
	return nil
}

func (f *fakeIPTables) List(table, chain string) ([]string, error) {
	out := []string{"-P " + chain + " ACCEPT"}
	for _, r := range f.chains[table+"/"+chain] {
		words := make([]string, len(r))
		for i, w := range r {
			if strings.ContainsAny(w, " \"") {
				w = `"` + strings.ReplaceAll(w, `"`, `\"`) + `"`
			}
			words[i] = w
		}
		out = append(out, "-A "+chain+" "+strings.Join(words, " "))
	}
	return out, nil
}

// comments returns the nodedns comments of a chain, in order ("-" for a
// foreign rule).
func (f *fakeIPTables) comments(table, chain string) []string {
	lines, _ := f.List(table, chain)
	var out []string
	for _, l := range lines[1:] {
		c := ruleComment(l)
		if c == "" {
			c = "-"
		}
		out = append(out, c)
	}
	return out
}

// fakeNetlink is one network namespace's links and addresses.
type fakeNetlink struct {
	noDummy bool
	links   map[string]netlink.Link
	addrs   map[string][]netlink.Addr
	up      map[string]bool
}

func newFakeNetlink() *fakeNetlink {
	return &fakeNetlink{links: map[string]netlink.Link{}, addrs: map[string][]netlink.Addr{}, up: map[string]bool{}}
}

func (f *fakeNetlink) LinkByName(name string) (netlink.Link, error) {
	l, ok := f.links[name]
	if !ok {
		return nil, netlink.LinkNotFoundError{}
	}
	return l, nil
}

func (f *fakeNetlink) LinkAdd(l netlink.Link) error {
	if _, ok := l.(*netlink.Dummy); ok && f.noDummy {
		return fmt.Errorf("link add: %w", unix.EOPNOTSUPP)
	}
	if _, ok := f.links[l.Attrs().Name]; ok {
		return unix.EEXIST
	}
	f.links[l.Attrs().Name] = l
	return nil
}

func (f *fakeNetlink) LinkDel(l netlink.Link) error {
	delete(f.links, l.Attrs().Name)
	delete(f.addrs, l.Attrs().Name)
	return nil
}

func (f *fakeNetlink) LinkSetUp(l netlink.Link) error {
	f.up[l.Attrs().Name] = true
	return nil
}

func (f *fakeNetlink) LinkSetIP6AddrGenMode(netlink.Link, int) error { return nil }

func (f *fakeNetlink) AddrList(l netlink.Link, _ int) ([]netlink.Addr, error) {
	return slices.Clone(f.addrs[l.Attrs().Name]), nil
}

func (f *fakeNetlink) AddrAdd(l netlink.Link, a *netlink.Addr) error {
	n := l.Attrs().Name
	for _, have := range f.addrs[n] {
		if have.IP.Equal(a.IP) {
			return unix.EEXIST
		}
	}
	f.addrs[n] = append(f.addrs[n], *a)
	return nil
}

func (f *fakeNetlink) AddrDel(l netlink.Link, a *netlink.Addr) error {
	n := l.Attrs().Name
	f.addrs[n] = slices.DeleteFunc(f.addrs[n], func(h netlink.Addr) bool { return h.IP.Equal(a.IP) })
	return nil
}

func (f *fakeNetlink) addrStrings(name string) []string {
	var out []string
	for _, a := range f.addrs[name] {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

var _ = net.IPv4len
