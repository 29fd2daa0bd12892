package nodenet

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The release table keeps the addresses pods query answering when no
// frontend does: after Teardown (the pod deleted or evicted, or `helm
// uninstall`), 169.254.20.10 is no longer on any interface and the node IP's
// port 53 has no socket, so pods whose resolv.conf names them would get no
// answer at all. The table rewrites such queries' destination to the
// kube-dns ClusterIP (Config.ReleaseTo) before kube-proxy's DNAT, which
// then sends them to a kube-dns endpoint; conntrack recorded the original
// destination first, so the answer comes back from the address the pod
// asked.
//
// It is installed by the first Sync and kept, Teardown included: it disables
// itself while a frontend serves (its queries are untracked, or their
// address is local and a socket is bound to it), so it works the instant the
// last frontend stops, even if it stops without running Teardown, and a
// frontend that comes back takes the node again with its NOTRACK rules
// alone. Installing it only at Teardown would leave it missing whenever a
// teardown does not run to the end, and deleting it at Setup would open a
// window with neither. It is the only thing nodedns leaves on a node after
// uninstall; it holds no state and touches only packets to the owned
// addresses' DNS port that nothing on the node answers.
//
// The kernel does it alone (no process, no conntrack entry of its own):
//
//	table inet nodedns-release {
//	  chain prerouting { type filter hook prerouting priority -150
//	    ct state untracked return   # a frontend owns the address (NOTRACK)
//	    iif lo return               # loopback: the node's own, seen in output
//	    ip daddr L udp dport 53 fib daddr type local socket transparent exists return
//	    [ip saddr S] ip daddr L udp dport 53 counter ip daddr set C
//	    ... (tcp likewise; ip6 likewise)
//	  }
//	  chain output { type route hook output priority -150
//	    ct state untracked return
//	    ip daddr L udp dport 53 fib daddr type local return
//	    ip daddr L udp dport 53 counter ip daddr set C
//	  }
//	}
//
// Priority -150 runs after conntrack (-200) has recorded the original
// tuple and before NAT (-100); a route chain re-routes a locally sent
// packet whose destination it changed.
const (
	ReleaseTable    = "nodedns-release"
	releasePriority = -150
)

// ReleaseRemoveCommand is the one command that removes the table from a
// node by hand (with nft installed on the node).
const ReleaseRemoveCommand = "nft delete table inet " + ReleaseTable

// NFT is what the manager needs of nftables to keep the release table.
// The host's netlink implements it; unit tests use a fake.
type NFT interface {
	// Release returns the comments of the table's rules by chain, and
	// whether the table exists.
	Release() (map[string][]string, bool, error)
	// ReplaceRelease replaces the table atomically with chains.
	ReplaceRelease(chains []ReleaseChain) error
	// DeleteRelease deletes the table if it exists.
	DeleteRelease() error
	// ReplaceRules replaces the rules of one existing regular chain.
	ReplaceRules(chain ReleaseChain) error
}

// ReleaseChain is one chain of the release table: a base chain, or a
// regular one when Hook is nil.
type ReleaseChain struct {
	Name     string
	Type     nftables.ChainType
	Hook     *nftables.ChainHook
	Priority int32
	Rules    []ReleaseRule
}

// ReleaseRule is one rule: its comment (unique within the table; how a
// sync recognises it) and its expressions.
type ReleaseRule struct {
	Comment string
	Exprs   []expr.Any
}

// releasePairs returns, for each local IP with a release address of its
// family, that pair.
func releasePairs(cfg Config) [][2]net.IP {
	var pairs [][2]net.IP
	for _, l := range cfg.LocalIPs {
		for _, c := range cfg.ReleaseTo {
			if familyOf(l) == familyOf(c) {
				pairs = append(pairs, [2]net.IP{l, c})
				break
			}
		}
	}
	return pairs
}

// ReleaseChains returns the table cfg wants: nil when cfg has no
// ReleaseTo address of the family of a local IP. cfg must have been
// validated. released drops the exemption of queries a local socket
// serves: from Release until Teardown ends, the stopping frontend still
// answers what reached its sockets but gets no new query, which would be
// lost once it stops reading.
func ReleaseChains(cfg Config, released bool) []ReleaseChain {
	pairs := releasePairs(cfg)
	if len(pairs) == 0 {
		return nil
	}
	pre := ReleaseChain{Name: "prerouting", Type: nftables.ChainTypeFilter, Hook: nftables.ChainHookPrerouting, Priority: releasePriority}
	out := ReleaseChain{Name: "output", Type: nftables.ChainTypeRoute, Hook: nftables.ChainHookOutput, Priority: releasePriority}
	// A frontend owns the address: raw NOTRACK took its queries out of
	// conntrack, and kube-proxy's DNAT could not apply to them anyway.
	untracked := ReleaseRule{Comment: "untracked: a frontend serves", Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitUNTRACKED), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}}
	pre.Rules = append(pre.Rules, untracked, ReleaseRule{
		// A host process's packets to a local address come back in
		// through lo after conntrack and NAT saw them in output.
		Comment: "loopback: handled in output",
		Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIF, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(1)},
			&expr.Verdict{Kind: expr.VerdictReturn},
		},
	})
	for _, name := range cfg.ReleaseSkipInterfaces {
		pre.Rules = append(pre.Rules, ReleaseRule{
			Comment: "from outside the node's networks: arrives on " + name,
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
				&expr.Verdict{Kind: expr.VerdictReturn},
			},
		})
	}
	out.Rules = append(out.Rules, untracked)
	// served holds the exemptions of queries a local socket serves, alone
	// in a chain of its own so that Release and Teardown swap them with
	// an update of that chain only: replacing the whole table re-registers
	// its hooks, and a query sent at that moment was lost (measured).
	served := ReleaseChain{Name: "served"}
	pre.Rules = append(pre.Rules, ReleaseRule{Comment: "exemptions", Exprs: []expr.Any{
		&expr.Verdict{Kind: expr.VerdictJump, Chain: "served"},
	}})
	port := strconv16(cfg.DNSPort)
	for _, p := range pairs {
		local, to := p[0], p[1]
		for _, proto := range []struct {
			name string
			num  byte
		}{{"udp", unix.IPPROTO_UDP}, {"tcp", unix.IPPROTO_TCP}} {
			what := fmt.Sprintf("%s to %s", proto.name, net.JoinHostPort(local.String(), fmt.Sprint(cfg.DNSPort)))
			match := append(daddrMatch(local), []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto.num}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
			}...)
			// The address is local and a socket is bound to it: a
			// frontend serves it (or, after uninstall, whatever the
			// operator runs there; in node-ip mode the node IP is always
			// local, so the socket decides). A socket left bound to an
			// address that is no longer local (the holder's, while the
			// pod stops) serves nothing: the rewrite applies.
			// accept ends this table's processing of the packet, as
			// return does in a base chain; NAT still follows.
			exempt := []expr.Any{
				&expr.Socket{Key: expr.SocketKeyTransparent, Register: 1},
				&expr.Verdict{Kind: expr.VerdictAccept},
			}
			if !released {
				served.Rules = append(served.Rules, ReleaseRule{Comment: "served locally: " + what, Exprs: concat(match, localDst(), exempt)})
			} else if proto.name == "tcp" {
				// A TCP query in flight keeps its connection to the
				// stopping frontend: only new connections (SYN) go.
				served.Rules = append(served.Rules, ReleaseRule{Comment: "connected: " + what, Exprs: concat(match, []expr.Any{
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
				}, localDst(), exempt)})
			}
			sources := cfg.ReleaseSources
			if len(sources) == 0 {
				sources = []*net.IPNet{nil}
			}
			for _, s := range sources {
				if s != nil && familyOf(s.IP) != familyOf(local) {
					continue
				}
				c := "release " + what + " to " + to.String()
				var from []expr.Any
				if s != nil {
					c += " from " + s.String()
					from = saddrMatch(s)
				}
				pre.Rules = append(pre.Rules, ReleaseRule{Comment: c, Exprs: concat(match, from, rewrite(to))})
			}
			// Output has no lookup of a listening socket (the packet's
			// socket is the sender's): only an address that is no longer
			// local is rewritten, so in node-ip mode the node's own
			// processes are not covered.
			out.Rules = append(out.Rules,
				ReleaseRule{Comment: "local: " + what, Exprs: concat(match, localDst(), []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})},
				ReleaseRule{Comment: "release " + what + " to " + to.String(), Exprs: concat(match, rewrite(to))})
		}
	}
	return []ReleaseChain{served, pre, out}
}

// ifname is an interface name as the kernel compares it: IFNAMSIZ bytes,
// NUL-padded.
func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func strconv16(n int) []byte { return binaryutil.BigEndian.PutUint16(uint16(n)) }

// nfproto matches the packet's family (the table is inet) and returns the
// network header offset and length of its addresses.
func nfproto(ip net.IP) (e []expr.Any, saddr, daddr, n uint32) {
	fam, saddr, daddr, n := byte(unix.NFPROTO_IPV4), uint32(12), uint32(16), uint32(4)
	if familyOf(ip) == IPv6 {
		fam, saddr, daddr, n = unix.NFPROTO_IPV6, 8, 24, 16
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}},
	}, saddr, daddr, n
}

func addrBytes(ip net.IP) []byte {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip.To16()
}

func daddrMatch(ip net.IP) []expr.Any {
	e, _, off, n := nfproto(ip)
	return append(e,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addrBytes(ip)})
}

func saddrMatch(s *net.IPNet) []expr.Any {
	_, off, _, n := nfproto(s.IP)
	mask := []byte(s.Mask)
	if len(mask) != int(n) {
		mask = mask[len(mask)-int(n):]
	}
	ip := addrBytes(s.IP.Mask(s.Mask))
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip},
	}
}

// localDst matches a destination that is a local address of the node.
func localDst() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// rewrite counts the packet and sets its destination to ip, updating the
// IPv4 header checksum and the transport checksum's pseudo-header, as nft's
// `ip daddr set` does.
func rewrite(ip net.IP) []expr.Any {
	_, _, off, n := nfproto(ip)
	p := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader,
		Offset: off, Len: n, CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR}
	if familyOf(ip) == IPv4 {
		p.CsumType, p.CsumOffset = expr.CsumTypeInet, 10
	}
	return []expr.Any{
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: addrBytes(ip)},
		p,
	}
}

// ReleaseComments returns chains' rule comments by chain: what NFT's
// Release lists for a table installed from chains.
func ReleaseComments(chains []ReleaseChain) map[string][]string { return releaseComments(chains) }

// SameRelease reports whether two listings of the table (ReleaseComments,
// NFT.Release) have the same rules.
func SameRelease(a, b map[string][]string) bool { return sameComments(a, b) }

// releaseComments returns chains' rule comments by chain.
func releaseComments(chains []ReleaseChain) map[string][]string {
	out := map[string][]string{}
	for _, c := range chains {
		for _, r := range c.Rules {
			out[c.Name] = append(out[c.Name], r.Comment)
		}
	}
	return out
}

// syncRelease converges the table to cfg (see ReleaseChains for
// released): replaced when its rules differ from those wanted, deleted when
// none are wanted.
func (m *Manager) syncRelease(released bool) error {
	if m.nft == nil {
		return nil
	}
	want := ReleaseChains(m.cfg, released)
	got, exists, err := m.nft.Release()
	if err != nil {
		if len(want) == 0 {
			// Nothing wanted, and nftables unusable (a kernel
			// without nf_tables): nothing can be left there either.
			return nil
		}
		return fmt.Errorf("nftables table %s: %w", ReleaseTable, err)
	}
	if len(want) == 0 {
		if !exists {
			return nil
		}
		return m.nft.DeleteRelease()
	}
	wantC := releaseComments(want)
	if exists && sameComments(got, wantC) {
		return nil
	}
	if exists && sameComments(without(got, "served"), without(wantC, "served")) {
		if _, ok := got["served"]; ok {
			for _, c := range want {
				if c.Name == "served" {
					return m.nft.ReplaceRules(c)
				}
			}
		}
	}
	if err := m.nft.ReplaceRelease(want); err != nil {
		return fmt.Errorf("nftables table %s: %w", ReleaseTable, err)
	}
	return nil
}

// without returns m less the key k.
func without(m map[string][]string, k string) map[string][]string {
	out := map[string][]string{}
	for key, v := range m {
		if key != k {
			out[key] = v
		}
	}
	return out
}

func sameComments(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// hostNFT is NFT on the host's nftables.
type hostNFT struct {
	c *nftables.Conn
}

// NewNFT returns nftables over a netlink socket of the network namespace
// of the calling thread, kept open so that every later call works there.
func NewNFT() (NFT, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return &hostNFT{c: c}, nil
}

var releaseTable = &nftables.Table{Name: ReleaseTable, Family: nftables.TableFamilyINet}

func (h *hostNFT) Release() (map[string][]string, bool, error) {
	if _, err := h.c.ListTableOfFamily(ReleaseTable, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, false, nil
		}
		return nil, false, err
	}
	chains, err := h.c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, true, err
	}
	out := map[string][]string{}
	for _, c := range chains {
		if c.Table.Name != ReleaseTable {
			continue
		}
		rules, err := h.c.GetRules(releaseTable, c)
		if err != nil {
			return nil, true, err
		}
		out[c.Name] = []string{}
		for _, r := range rules {
			s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			out[c.Name] = append(out[c.Name], s)
		}
	}
	return out, true, nil
}

func (h *hostNFT) ReplaceRelease(chains []ReleaseChain) error {
	// add, delete, add: one transaction whether or not the table exists,
	// so packets see the old table or the new one, never none.
	h.c.AddTable(releaseTable)
	h.c.DelTable(releaseTable)
	t := h.c.AddTable(releaseTable)
	for _, fc := range chains {
		ch := &nftables.Chain{Name: fc.Name, Table: t}
		if fc.Hook != nil {
			prio := nftables.ChainPriority(fc.Priority)
			ch.Type, ch.Hooknum, ch.Priority = fc.Type, fc.Hook, &prio
		}
		c := h.c.AddChain(ch)
		for _, r := range fc.Rules {
			h.c.AddRule(&nftables.Rule{Table: t, Chain: c, Exprs: r.Exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, r.Comment)})
		}
	}
	return h.c.Flush()
}

func (h *hostNFT) ReplaceRules(fc ReleaseChain) error {
	c := &nftables.Chain{Name: fc.Name, Table: releaseTable}
	h.c.FlushChain(c)
	for _, r := range fc.Rules {
		h.c.AddRule(&nftables.Rule{Table: releaseTable, Chain: c, Exprs: r.Exprs,
			UserData: userdata.AppendString(nil, userdata.TypeComment, r.Comment)})
	}
	return h.c.Flush()
}

func (h *hostNFT) DeleteRelease() error {
	h.c.AddTable(releaseTable)
	h.c.DelTable(releaseTable)
	return h.c.Flush()
}

// conntrackDeleter is the part of *netlink.Handle that forgets conntrack
// entries (the fake Netlink of unit tests has none).
type conntrackDeleter interface {
	ConntrackDeleteFilters(table netlink.ConntrackTableType, family netlink.InetFamily, filters ...netlink.CustomConntrackFilter) (uint, error)
}

// servedHere matches the conntrack entries of queries to a local IP's DNS
// port that were delivered to a local socket rather than DNATed: those a
// frontend answered while its queries were tracked (after Release, or
// before its NOTRACK rules were in place). Such an entry binds its flow to
// "no NAT" for as long as it lives (30 s to minutes), so a client that
// sends again from the same port (c-ares, a long-lived UDP socket) would
// get its queries rewritten by the release table and then not DNATed: lost.
// Deleting them lets its next query start a new entry that is.
type servedHere struct {
	ips  []net.IP
	port uint16
}

func (f servedHere) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	fw, rv := flow.Forward, flow.Reverse
	if fw.DstPort != f.port || (fw.Protocol != unix.IPPROTO_UDP && fw.Protocol != unix.IPPROTO_TCP) || !rv.SrcIP.Equal(fw.DstIP) {
		return false
	}
	return slices.ContainsFunc(f.ips, fw.DstIP.Equal)
}

// forgetServedHere deletes the conntrack entries servedHere matches, once
// no frontend serves the local IPs any more.
func (m *Manager) forgetServedHere() error {
	cd, ok := m.nl.(conntrackDeleter)
	if !ok || len(releasePairs(m.cfg)) == 0 {
		return nil
	}
	f := servedHere{ips: m.cfg.LocalIPs, port: uint16(m.cfg.DNSPort)}
	var errs []error
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		n, err := cd.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("conntrack: %w", err))
		}
		if n > 0 {
			m.log.Info("forgot conntrack entries of queries the frontend answered", zap.Uint("entries", n))
		}
	}
	return errors.Join(errs...)
}
