package nodenet

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Netlink is the part of github.com/vishvananda/netlink that nodedns uses.
// *netlink.Handle implements it; unit tests use a fake.
type Netlink interface {
	LinkByName(name string) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	LinkSetUp(link netlink.Link) error
	LinkSetIP6AddrGenMode(link netlink.Link, mode int) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrAdd(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error
}

// NewNetlink returns a netlink handle bound to the network namespace of the
// calling thread.
func NewNetlink() (Netlink, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return h, nil
}

// isNotSupported reports whether err says the kernel lacks a link type
// (RTM_NEWLINK with an unknown kind fails with EOPNOTSUPP when no module
// provides it).
func isNotSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP)
}

// isNotFound reports whether err says a link does not exist.
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// Link kinds nodedns creates. A dummy link is what NodeLocal DNSCache and
// kube-proxy's IPVS mode use. Kernels without CONFIG_DUMMY get a bridge
// with no ports instead: it is up with a carrier, its addresses are local,
// and nothing is ever attached to it, so it forwards nothing.
const (
	kindDummy  = "dummy"
	kindBridge = "bridge"
)

// addrFlags keeps the kernel from adding prefix routes for the owned
// addresses (noprefixroute) and, for IPv6, from delaying them by duplicate
// address detection (nodad): the addresses are only ever local.
func addrFlags(ip net.IP) int {
	if ip.To4() != nil {
		return unix.IFA_F_NOPREFIXROUTE
	}
	return unix.IFA_F_NOPREFIXROUTE | unix.IFA_F_NODAD
}

func hostNet(ip net.IP) *net.IPNet {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}
}

// ensureLink returns the link named name, creating it when missing. The
// first time the kernel refuses a dummy link, it logs once and uses a bridge
// from then on.
func (m *Manager) ensureLink() (netlink.Link, error) {
	l, err := m.nl.LinkByName(m.cfg.Interface)
	if err == nil {
		if k := l.Type(); k != kindDummy && k != kindBridge {
			return nil, fmt.Errorf("link %q exists with type %q: not created by nodedns, refusing to use it", m.cfg.Interface, k)
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			if err := m.nl.LinkSetUp(l); err != nil {
				return nil, fmt.Errorf("set %q up: %w", m.cfg.Interface, err)
			}
		}
		return l, nil
	}
	if !isNotFound(err) {
		return nil, fmt.Errorf("look up link %q: %w", m.cfg.Interface, err)
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = m.cfg.Interface
	if !m.noDummy.Load() {
		err = m.nl.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
		if isNotSupported(err) {
			m.noDummy.Store(true)
			m.log.Warn("kernel has no dummy link type; holding the addresses on a bridge with no ports instead",
				zap.String("interface", m.cfg.Interface), zap.Error(err))
		}
	}
	if m.noDummy.Load() {
		err = m.nl.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
	}
	if err != nil {
		return nil, fmt.Errorf("add link %q: %w", m.cfg.Interface, err)
	}
	l, err = m.nl.LinkByName(m.cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("look up new link %q: %w", m.cfg.Interface, err)
	}
	// No IPv6 link-local address and hence no fe80::/64 route: the link
	// carries only the owned addresses. Kernels without IPv6 refuse this;
	// that costs nothing.
	if err := m.nl.LinkSetIP6AddrGenMode(l, addrGenModeNone); err != nil {
		m.log.Debug("set addrgenmode none", zap.String("interface", m.cfg.Interface), zap.Error(err))
	}
	if err := m.nl.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set %q up: %w", m.cfg.Interface, err)
	}
	return l, nil
}

// syncAddrs makes the link hold exactly LinkIPs.
func (m *Manager) syncAddrs(l netlink.Link) error {
	want := map[string]net.IP{}
	for _, ip := range m.cfg.LinkIPs() {
		want[ip.String()] = ip
	}
	have, err := m.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %q: %w", m.cfg.Interface, err)
	}
	var errs []error
	for _, a := range have {
		ones, bits := a.Mask.Size()
		if _, ok := want[a.IP.String()]; ok && ones == bits {
			delete(want, a.IP.String())
			continue
		}
		a := a
		if err := m.nl.AddrDel(l, &a); err != nil {
			errs = append(errs, fmt.Errorf("remove %s from %q: %w", a.IPNet, m.cfg.Interface, err))
		}
	}
	for _, ip := range m.cfg.LinkIPs() {
		if _, missing := want[ip.String()]; !missing {
			continue
		}
		a := &netlink.Addr{IPNet: hostNet(ip), Flags: addrFlags(ip)}
		if err := m.nl.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add %s to %q: %w", ip, m.cfg.Interface, err))
		}
	}
	return errors.Join(errs...)
}

// removeUnwantedAddrs removes the link's addresses that are not LinkIPs.
func (m *Manager) removeUnwantedAddrs(l netlink.Link) error {
	want := map[string]bool{}
	for _, ip := range m.cfg.LinkIPs() {
		want[ip.String()] = true
	}
	have, err := m.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %q: %w", m.cfg.Interface, err)
	}
	var errs []error
	for _, a := range have {
		if want[a.IP.String()] {
			continue
		}
		a := a
		if err := m.nl.AddrDel(l, &a); err != nil {
			errs = append(errs, fmt.Errorf("remove %s from %q: %w", a.IPNet, m.cfg.Interface, err))
			continue
		}
		m.log.Info("removed stale address", zap.String("interface", m.cfg.Interface), zap.Stringer("address", a.IPNet))
	}
	return errors.Join(errs...)
}

// deleteLink removes the link; a missing link is not an error.
func (m *Manager) deleteLink() error {
	l, err := m.nl.LinkByName(m.cfg.Interface)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up link %q: %w", m.cfg.Interface, err)
	}
	if k := l.Type(); k != kindDummy && k != kindBridge {
		return fmt.Errorf("link %q has type %q: not created by nodedns, leaving it", m.cfg.Interface, k)
	}
	if err := m.nl.LinkDel(l); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete link %q: %w", m.cfg.Interface, err)
	}
	return nil
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE from <linux/if_link.h>.
const addrGenModeNone = 1

// DefaultRouteInterfaces returns the names of the interfaces that carry
// the node's default routes (IPv4 and IPv6, main table), sorted and
// without repeats: where hosts outside the node's networks come in.
func DefaultRouteInterfaces() ([]string, error) {
	var names []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			idx := []int{r.LinkIndex}
			for _, nh := range r.MultiPath {
				idx = append(idx, nh.LinkIndex)
			}
			for _, i := range idx {
				if i == 0 {
					continue
				}
				l, err := netlink.LinkByIndex(i)
				if err != nil {
					return nil, fmt.Errorf("default route's link %d: %w", i, err)
				}
				names = append(names, l.Attrs().Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
