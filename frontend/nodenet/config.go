package nodenet

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Mode is how pods reach the frontend; see docs/modes.md.
type Mode string

// Modes.
const (
	// ModeIPTables owns the link-local IP and the kube-dns ClusterIP(s) on a
	// local interface, with NOTRACK so kube-proxy's DNAT never sees the
	// queries. For kube-proxy in iptables or nftables mode.
	ModeIPTables Mode = "iptables"
	// ModeLinkLocal owns the link-local IP only; kubelet's clusterDNS points
	// at it. For kube-proxy IPVS and Cilium's kube-proxy replacement, which
	// would otherwise capture a locally bound ClusterIP.
	ModeLinkLocal Mode = "link-local"
	// ModeNodeIP owns the node IP (already local: only NOTRACK/ACCEPT rules
	// for its port 53) and, when given, the kube-dns ClusterIP(s) as
	// ModeIPTables does, on the interface, which holds only them: pods that
	// name the ClusterIP are answered here, never DNATed by kube-proxy to
	// this node's own IP, whose answers the NOTRACK rules keep from
	// conntrack's reverse NAT.
	ModeNodeIP Mode = "node-ip"
)

// Defaults.
const (
	DefaultInterface    = "nodedns"
	DefaultLocalIP      = "169.254.20.10"
	DefaultSyncInterval = 10 * time.Second
	DefaultDNSPort      = 53
)

// Config is what the node networking owns. The zero value of optional
// fields takes the default named in its comment.
type Config struct {
	// Mode selects which addresses are owned; default ModeIPTables.
	Mode Mode
	// IPTables is the iptables backend NewHost uses; empty detects the
	// host's (DetectBackend). nft needs no CAP_NET_RAW: iptables-nft
	// talks netlink, iptables-legacy a raw socket.
	IPTables Backend
	// LocalIPs are the addresses pods' queries go to: the link-local IP(s),
	// or the node IP(s) in ModeNodeIP. Default 169.254.20.10.
	LocalIPs []net.IP
	// ServiceIPs are the kube-dns ClusterIP(s); owned in ModeIPTables
	// (required) and ModeNodeIP, ignored in ModeLinkLocal.
	ServiceIPs []net.IP
	// Interface is the name of the link that holds the addresses; default
	// "nodedns". Unused in ModeNodeIP without ServiceIPs.
	Interface string
	// DNSPort is the port the frontend answers on; default 53.
	DNSPort int
	// HealthPort, when non-zero, also gets NOTRACK rules so that kubelet's
	// probes to a local IP leave no conntrack entries.
	HealthPort int
	// SyncInterval is how often Run re-applies the interface and rules;
	// default 10s.
	SyncInterval time.Duration
	// Backend is the local backend's TCP address (host:port) as the
	// frontend dials it. When its host is a loopback IP, the frontend's
	// connections to it get NOTRACK and ACCEPT rules too, so that misses
	// leave no conntrack entries either (docs/architecture.md, "Frontend
	// to backend"). Another host (a name, a pod IP) gets no rule. Default
	// none.
	Backend string
	// ReleaseTo are the kube-dns ClusterIP(s), at most one per family,
	// that queries to the LocalIPs go to whenever no frontend serves them
	// (the release table, releasetable.go): through kube-proxy's DNAT of
	// that ClusterIP. Empty: no table, and Sync deletes one left earlier.
	ReleaseTo []net.IP
	// ReleaseSources limits the release table to queries from these
	// source prefixes (pods' network, say); empty: any source. Nothing
	// sets it yet; in node-ip mode it is how the node IP's port 53 could be
	// kept from answering beyond the node's own pods.
	ReleaseSources []*net.IPNet
	// ReleaseSkipInterfaces are interfaces whose incoming queries the
	// release table never rewrites. In node-ip mode the frontend gives the
	// interfaces of the node's default routes: hosts outside the node's
	// networks arrive through them, and once no frontend answers (after
	// helm uninstall, for good) the node IP's port 53 must not become a
	// way into kube-dns for them. The node's pods arrive on their own
	// links (veth, bridge).
	ReleaseSkipInterfaces []string
}

func (c *Config) setDefaults() {
	if c.Mode == "" {
		c.Mode = ModeIPTables
	}
	if len(c.LocalIPs) == 0 {
		c.LocalIPs = []net.IP{net.ParseIP(DefaultLocalIP)}
	}
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	if c.DNSPort == 0 {
		c.DNSPort = DefaultDNSPort
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
}

// Validate fills in defaults and reports the first inconsistency.
func (c *Config) Validate() error {
	c.setDefaults()
	switch c.Mode {
	case ModeIPTables, ModeLinkLocal, ModeNodeIP:
	default:
		return fmt.Errorf("mode %q: want iptables, link-local or node-ip", c.Mode)
	}
	for _, ip := range append(append([]net.IP(nil), c.LocalIPs...), c.ServiceIPs...) {
		if ip == nil || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() {
			return fmt.Errorf("address %v cannot be owned by the node DNS", ip)
		}
	}
	if c.Mode == ModeNodeIP {
		for _, ip := range c.LocalIPs {
			if ip.IsLinkLocalUnicast() {
				return fmt.Errorf("mode node-ip needs --local-ip set to the node IP (status.hostIP), not %v", ip)
			}
			for _, s := range c.ServiceIPs {
				if s.Equal(ip) {
					return fmt.Errorf("mode node-ip: %v is both the node IP (--local-ip) and the kube-dns ClusterIP (--service-ip)", ip)
				}
			}
		}
	}
	if c.Mode == ModeIPTables && len(c.ServiceIPs) == 0 {
		return errors.New("mode iptables needs --service-ip (the kube-dns ClusterIP); use --mode=link-local to own only the link-local IP")
	}
	if c.UsesLink() && (len(c.Interface) > 15 || c.Interface == "lo") {
		return fmt.Errorf("interface %q: want a new link name of at most 15 bytes", c.Interface)
	}
	if c.DNSPort < 1 || c.DNSPort > 65535 || c.HealthPort < 0 || c.HealthPort > 65535 {
		return fmt.Errorf("ports %d/%d out of range", c.DNSPort, c.HealthPort)
	}
	if c.Backend != "" {
		if _, _, err := c.loopbackBackend(); err != nil {
			return err
		}
	}
	seen := map[Family]bool{}
	for _, ip := range c.ReleaseTo {
		if ip == nil || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
			return fmt.Errorf("release address %v: want the kube-dns ClusterIP", ip)
		}
		if seen[familyOf(ip)] {
			return fmt.Errorf("release addresses %v: at most one per IP family", c.ReleaseTo)
		}
		seen[familyOf(ip)] = true
		for _, l := range c.LocalIPs {
			if l.Equal(ip) {
				return fmt.Errorf("release address %v is a local IP: queries would loop", ip)
			}
		}
	}
	for _, s := range c.ReleaseSources {
		if s == nil || s.IP == nil {
			return errors.New("release source: empty prefix")
		}
	}
	for _, name := range c.ReleaseSkipInterfaces {
		if name == "" || len(name) >= 16 {
			return fmt.Errorf("release: interface name %q: want 1 to 15 characters", name)
		}
	}
	if c.SyncInterval < 100*time.Millisecond {
		return fmt.Errorf("sync interval %v: want at least 100ms", c.SyncInterval)
	}
	return nil
}

// OwnedIPs returns the addresses the node DNS takes over in this mode:
// those matched by the rules (LinkIPs are those put on the interface).
func (c *Config) OwnedIPs() []net.IP {
	ips := append([]net.IP(nil), c.LocalIPs...)
	if c.Mode != ModeLinkLocal {
		ips = append(ips, c.ServiceIPs...)
	}
	return ips
}

// LinkIPs returns the owned addresses the interface holds: all of them,
// except in ModeNodeIP the node IP, which is local already.
func (c *Config) LinkIPs() []net.IP {
	if c.Mode == ModeNodeIP {
		return append([]net.IP(nil), c.ServiceIPs...)
	}
	return c.OwnedIPs()
}

// UsesLink reports whether this configuration puts addresses on the
// interface: every mode but ModeNodeIP without ServiceIPs, which removes
// a link left by another configuration instead.
func (c *Config) UsesLink() bool {
	return len(c.LinkIPs()) > 0
}

// loopbackBackend returns the IP and port of Backend when its host is a
// loopback IP and its port a number, and a nil IP otherwise (Backend empty,
// a host name, a service name). The error is for a Backend that is not
// host:port, or whose port number is out of range.
func (c *Config) loopbackBackend() (net.IP, int, error) {
	if c.Backend == "" {
		return nil, 0, nil
	}
	host, port, err := net.SplitHostPort(c.Backend)
	if err != nil {
		return nil, 0, fmt.Errorf("backend %q: %w", c.Backend, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		// A service name ("domain"), which the dialer looks up: no
		// rule, as for a host name.
		return nil, 0, nil
	}
	if p < 1 || p > 65535 {
		return nil, 0, fmt.Errorf("backend %q: port %d out of range", c.Backend, p)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, 0, nil
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return ip, p, nil
}

// ParseIPs parses a comma separated list of addresses ("" gives none).
func ParseIPs(s string) ([]net.IP, error) {
	var ips []net.IP
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ip := net.ParseIP(f)
		if ip == nil {
			return nil, fmt.Errorf("%q is not an IP address", f)
		}
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		ips = append(ips, ip)
	}
	return ips, nil
}
