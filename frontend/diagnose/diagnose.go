// Package diagnose checks a node's DNS as an operator would, and says how to
// fix each problem it finds. `nodedns-frontend diagnose` runs it on the node
// (hostNetwork), with the frontend's own flags.
package diagnose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/gate"
	"github.com/nodedns/nodedns/frontend/nodenet"
	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/metrics"
)

// Defaults of Config fields left empty.
const (
	DefaultResolvConf    = "/etc/resolv.conf"
	DefaultKubeletConfig = "/var/lib/kubelet/config.yaml"
	// DefaultProcessName is the frontend's /proc/<pid>/comm (the kernel
	// keeps 15 bytes of the name).
	DefaultProcessName = "nodedns-fronten"
	// DefaultTimeout bounds each DNS or HTTP probe: well above a healthy
	// round trip on the node, short enough that a dozen checks finish fast.
	DefaultTimeout = 2 * time.Second
	// conntrackFull is the share of nf_conntrack_max past which new flows
	// (everything but nodedns's untracked queries) start being dropped soon.
	conntrackFull = 0.9
)

// Config is what the node is expected to look like: the frontend's flags.
type Config struct {
	Net             nodenet.Config // mode, owned addresses, interface
	SetupNetwork    bool           // false: the interface and rules are not checked
	Listen          []string       // host:port the frontend serves on
	Backend         string
	BackendReadyURL string
	Fallbacks       []string
	ResolvConf      string // default DefaultResolvConf
	KubeletConfig   string // default DefaultKubeletConfig
	ProcessName     string // default DefaultProcessName
	Timeout         time.Duration
	// Proc is the procfs root; default "/proc". Socket tables are read from
	// Proc/thread-self/net so that they are those of the caller's netns.
	Proc string
}

// Finding is the result of one check: it held (OK), it did not run
// (Skipped, Detail says why), or it failed (neither).
type Finding struct {
	Check   string // "interface", "rules", "listener udp 169.254.20.10:53", ...
	OK      bool
	Skipped bool // the check could not look: never reported as passed
	Detail  string
	Fix     string // how to fix it, or how to make a skipped check run
}

func (c *Config) setDefaults() {
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	if c.KubeletConfig == "" {
		c.KubeletConfig = DefaultKubeletConfig
	}
	if c.ProcessName == "" {
		c.ProcessName = DefaultProcessName
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Proc == "" {
		c.Proc = "/proc"
	}
}

// Run runs every check in the order an operator would: is the takeover in
// place, does the frontend listen and answer, is the backend behind it
// ready, do the fallbacks and the node's resolvers answer, is conntrack
// healthy, and does kubelet send pods to the right address.
func Run(ctx context.Context, cfg Config) []Finding {
	cfg.setDefaults()
	var out []Finding
	if err := cfg.Net.Validate(); err != nil {
		return []Finding{{Check: "config", Detail: err.Error(), Fix: "pass diagnose the same flags as the frontend's DaemonSet"}}
	}
	if cfg.SetupNetwork {
		if cfg.Net.Mode == nodenet.ModeNodeIP {
			out = append(out, checkNodeIP(cfg))
		}
		if cfg.Net.UsesLink() {
			out = append(out, checkInterface(cfg))
		}
		out = append(out, checkRules(ctx, cfg)...)
		out = append(out, checkReleaseTable(cfg))
	} else {
		out = append(out, Finding{Check: "interface and rules", Skipped: true,
			Detail: "--setup-network=false: something else owns the addresses and rules, diagnose does not know what to expect"})
	}
	out = append(out, checkListeners(cfg)...)
	out = append(out, checkBackend(ctx, cfg))
	for _, fb := range cfg.Fallbacks {
		out = append(out, checkDNS("fallback "+fb, "tcp", fb, cfg.Timeout,
			"other nodes' backends are unreachable over TCP: check the fallback Service's endpoints (kubectl -n kube-system get endpointslices -l kubernetes.io/service-name=<fallback Service>) and that nodedns-backend listens on its fallback port (backend.fallbackPort: 53 on the node IP, 5301 in node-ip mode) on the other nodes"))
	}
	out = append(out, checkResolvConf(cfg)...)
	out = append(out, checkConntrack(cfg))
	out = append(out, checkKubelet(cfg))
	return out
}

// Write prints the findings, one line each marked ok, FAIL or SKIP, with the
// fix under failures (and under skips, how to make the check run), and
// reports whether none failed. Skipped checks are named again in the last
// line: a check that did not run must not read as passed.
func Write(w io.Writer, findings []Finding) bool {
	ok := true
	var skipped []string
	for _, f := range findings {
		mark := "ok  "
		switch {
		case f.Skipped:
			mark = "SKIP"
			skipped = append(skipped, f.Check)
		case !f.OK:
			mark, ok = "FAIL", false
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", mark, f.Check, f.Detail)
		if !f.OK && f.Fix != "" {
			label := "fix"
			if f.Skipped {
				label = "to run it"
			}
			fmt.Fprintf(w, "       %s: %s\n", label, f.Fix)
		}
	}
	switch {
	case !ok:
		fmt.Fprintln(w, "some checks failed")
	case len(skipped) > 0:
		fmt.Fprintf(w, "no check failed; %d not run: %s\n", len(skipped), strings.Join(skipped, ", "))
	default:
		fmt.Fprintln(w, "all checks passed")
	}
	return ok
}

func checkInterface(cfg Config) Finding {
	f := Finding{Check: "interface " + cfg.Net.Interface}
	fix := fmt.Sprintf("the frontend creates it once the backend is ready: check its /ready and its log for \"node network setup\" (metric nodedns_setup_errors_total); by hand: ip link add %s type dummy (or type bridge); ip addr add <ip>/32 dev %s noprefixroute; ip link set %s up", cfg.Net.Interface, cfg.Net.Interface, cfg.Net.Interface)
	nl, err := nodenet.NewNetlink()
	if err != nil {
		f.Detail, f.Fix = err.Error(), "run diagnose as root on the node (hostNetwork)"
		return f
	}
	l, err := nl.LinkByName(cfg.Net.Interface)
	if err != nil {
		f.Detail, f.Fix = fmt.Sprintf("missing: %v", err), fix
		return f
	}
	var problems []string
	if l.Attrs().Flags&net.FlagUp == 0 {
		problems = append(problems, "down")
	}
	have := map[string]bool{}
	addrs, err := nl.AddrList(l, 0)
	if err != nil {
		f.Detail, f.Fix = fmt.Sprintf("list addresses: %v", err), fix
		return f
	}
	var held []string
	for _, a := range addrs {
		ones, bits := a.Mask.Size()
		if ones == bits {
			have[a.IP.String()] = true
		}
		held = append(held, a.IPNet.String())
	}
	for _, ip := range cfg.Net.LinkIPs() {
		if !have[ip.String()] {
			problems = append(problems, "lacks "+ip.String())
		}
	}
	f.Detail = fmt.Sprintf("%s link, holds %s", l.Type(), strings.Join(held, ", "))
	if len(problems) > 0 {
		f.Detail += "; " + strings.Join(problems, ", ")
		f.Fix = fix
		return f
	}
	f.OK = true
	return f
}

func checkNodeIP(cfg Config) Finding {
	f := Finding{Check: "node IP"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	have := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			have[n.IP.String()] = true
		}
	}
	for _, ip := range cfg.Net.LocalIPs {
		if !have[ip.String()] {
			f.Detail = fmt.Sprintf("%s is not an address of this node", ip)
			f.Fix = "in node-ip mode --local-ip must be the node's own IP (status.hostIP)"
			return f
		}
	}
	f.OK, f.Detail = true, "node-ip mode: the node IP is local"
	return f
}

// checkReleaseTable compares the nftables table that sends queries to the
// local IPs to kube-dns when no frontend serves them with the one the
// configuration wants. It stays on the node after uninstall on purpose.
func checkReleaseTable(cfg Config) Finding {
	f := Finding{Check: "release table (nftables inet " + nodenet.ReleaseTable + ")"}
	nft, err := nodenet.NewNFT()
	var got map[string][]string
	var exists bool
	if err == nil {
		got, exists, err = nft.Release()
	}
	want := nodenet.ReleaseChains(cfg.Net, false)
	switch {
	case err != nil && len(want) == 0:
		f.Skipped, f.Detail = true, "not wanted (no --release-to), but whether one is left cannot be seen: nftables not readable: "+err.Error()
		f.Fix = "run diagnose as root on the node (hostNetwork)"
	case err != nil:
		f.Detail = "cannot list it: " + err.Error()
		f.Fix = "run diagnose as root on the node (hostNetwork); the kernel needs nf_tables"
	case len(want) == 0 && !exists:
		f.OK, f.Detail = true, "not wanted (no --release-to) and absent"
	case len(want) == 0:
		f.OK, f.Detail = true, "present but not wanted (no --release-to): the frontend deletes it at its next sync"
	case !exists:
		f.Detail = "absent: without a frontend, queries to the local IPs would get no answer"
		f.Fix = "the frontend installs it at start and restores it within --sync-interval; read its log for \"node network setup\""
	case nodenet.SameRelease(got, nodenet.ReleaseComments(want)) || nodenet.SameRelease(got, nodenet.ReleaseComments(nodenet.ReleaseChains(cfg.Net, true))):
		f.OK = true
		f.Detail = fmt.Sprintf("present: queries to the local IPs go to %v whenever no frontend serves them (kept after uninstall on purpose; remove by hand: %s)",
			cfg.Net.ReleaseTo, nodenet.ReleaseRemoveCommand)
	default:
		f.Detail = "present, with other rules than the configuration wants (another --release-to?)"
		f.Fix = "the frontend replaces it within --sync-interval while it runs"
	}
	return f
}

// checkRules compares the rules in the iptables backend the host uses with
// those the configuration wants, and looks for nodedns rules in the other
// backend, where they would be checked by the kernel too but never repaired.
func checkRules(ctx context.Context, cfg Config) []Finding {
	backend, _ := nodenet.DetectBackend(ctx, nodenet.ExecRunner)
	want := nodenet.Rules(cfg.Net)
	f := Finding{Check: "rules (iptables-" + string(backend) + ")"}
	var missing []string
	tables := map[nodenet.Family]nodenet.IPTables{}
	for _, r := range want {
		ipt, ok := tables[r.Family]
		if !ok {
			var err error
			if ipt, err = nodenet.NewIPTables(backend, r.Family); err != nil {
				f.Detail = err.Error()
				f.Fix = "install iptables (Debian: apt-get install iptables); diagnose needs iptables-legacy and iptables-nft"
				return []Finding{f}
			}
			tables[r.Family] = ipt
		}
		ok, err := ipt.Exists(r.Table, r.Chain, r.Spec...)
		if err != nil {
			f.Detail = fmt.Sprintf("check %s: %v", r, err)
			f.Fix = "run diagnose as root on the node (hostNetwork)"
			return []Finding{f}
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("%s %s/%s %q", r.Family, r.Table, r.Chain, r.Comment))
		}
	}
	if len(missing) > 0 {
		switch {
		case len(missing) == len(want):
			f.Detail = fmt.Sprintf("none of the %d rules installed", len(want))
		case len(missing) > 4:
			f.Detail = fmt.Sprintf("%d of %d rules missing: %s; ...", len(missing), len(want), strings.Join(missing[:4], "; "))
		default:
			f.Detail = fmt.Sprintf("%d of %d rules missing: %s", len(missing), len(want), strings.Join(missing, "; "))
		}
		f.Fix = fmt.Sprintf("the frontend restores them within --sync-interval while it runs and the backend has been ready once; if they stay missing, read its log for \"node network setup\"; compare: iptables-%s-save | grep nodedns:", backend)
	} else {
		f.OK = true
		f.Detail = fmt.Sprintf("all %d rules present", len(want))
	}
	out := []Finding{f}
	other := nodenet.BackendLegacy
	if backend == other {
		other = nodenet.BackendNFT
	}
	g := Finding{Check: "rules (iptables-" + string(other) + ", unused)", OK: true, Detail: "no nodedns rules"}
	var stray int
	for _, bin := range []string{"iptables-" + string(other) + "-save", "ip6tables-" + string(other) + "-save"} {
		b, _ := nodenet.ExecRunner(ctx, bin)
		stray += strings.Count(string(b), "--comment \""+nodenet.CommentPrefix)
	}
	if stray > 0 {
		g.OK = false
		g.Detail = fmt.Sprintf("%d nodedns rules in the backend kube-proxy does not use", stray)
		g.Fix = fmt.Sprintf("an instance chose the other backend earlier; remove them: iptables-%s-save | grep -v 'nodedns:' | iptables-%s-restore (and ip6tables likewise)", other, other)
	}
	return append(out, g)
}

// checkListeners finds who holds each --listen address, and asks it.
func checkListeners(cfg Config) []Finding {
	var out []Finding
	tables := map[string][]socket{}
	for _, name := range []string{"udp", "udp6", "tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(cfg.Proc, "thread-self", "net", name))
		if err != nil {
			continue
		}
		if s, err := parseProcNet(string(b)); err == nil {
			tables[name] = s
		}
	}
	for _, addr := range cfg.Listen {
		host, portStr, err := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(portStr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil {
			out = append(out, Finding{Check: "listener " + addr, Detail: "not an IP:port"})
			continue
		}
		for _, proto := range []string{"udp", "tcp"} {
			out = append(out, checkListener(cfg, tables, proto, ip, port))
		}
	}
	return out
}

func checkListener(cfg Config, tables map[string][]socket, proto string, ip net.IP, port int) Finding {
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	f := Finding{Check: fmt.Sprintf("listener %s %s", proto, addr)}
	// Sockets that receive ip:port: bound to it, or to the wildcard.
	inodes := map[uint64]bool{}
	var exact, wildcard []uint64
	for _, name := range []string{proto, proto + "6"} {
		for _, s := range tables[name] {
			if s.Port != port || (proto == "tcp" && s.State != tcpListen) {
				continue
			}
			switch {
			case s.IP.Equal(ip):
				exact = append(exact, s.Inode)
			case s.IP.IsUnspecified() && (name == proto+"6" || ip.To4() != nil):
				wildcard = append(wildcard, s.Inode)
			default:
				continue
			}
			inodes[s.Inode] = true
		}
	}
	holders := socketHolders(cfg.Proc, inodes)
	var ours, others []string
	for _, group := range [][]uint64{exact, wildcard} {
		for _, in := range group {
			for _, h := range holders[in] {
				if h.Comm == cfg.ProcessName {
					ours = append(ours, h.String())
				} else {
					others = append(others, h.String())
				}
			}
		}
	}
	switch {
	case len(others) > 0:
		f.Detail = fmt.Sprintf("port %d is held by %s: the frontend gets \"address already in use\"", port, strings.Join(dedup(others), ", "))
		f.Fix = "stop that process, or make it bind only its own addresses (dnsmasq: bind-interfaces; systemd-resolved: DNSStubListener=no)"
		return f
	case len(exact)+len(wildcard) == 0:
		f.Detail = "nothing listens"
		f.Fix = "start nodedns-frontend (kubectl -n kube-system get pods -l app.kubernetes.io/name=nodedns -o wide) and read its log"
		return f
	}
	who := "the frontend"
	if len(ours) > 0 {
		who = strings.Join(dedup(ours), ", ")
	}
	a := checkDNS(f.Check, proto, addr, cfg.Timeout, "the frontend holds the socket but does not answer: read its log; check /ready and nodedns_setup_errors_total")
	if a.OK {
		a.Detail = "held by " + who + "; " + a.Detail
	}
	return a
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// checkDNS asks ". NS" at addr and tells a refused connection from a
// timeout: nothing listens, versus something that swallows the query.
func checkDNS(check, network, addr string, timeout time.Duration, fix string) Finding {
	f := Finding{Check: check}
	m := new(dns.Msg)
	m.SetQuestion(".", dns.TypeNS)
	start := time.Now()
	r, err := upstream.Exchange(context.Background(), network, addr, m, timeout)
	if err != nil {
		f.Detail, f.Fix = describe(network, addr, err), fix
		return f
	}
	f.OK = true
	f.Detail = fmt.Sprintf("answers over %s (%s in %v)", network, dns.RcodeToString[r.Rcode], time.Since(start).Round(time.Millisecond))
	return f
}

// describe says what a failed exchange means for an operator.
func describe(network, addr string, err error) string {
	if errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) {
		return fmt.Sprintf("%s %s: %v: the address is not on this node and no route leads to it", network, addr, err)
	}
	switch upstream.Reason(err) {
	case upstream.ReasonRefused:
		return fmt.Sprintf("%s %s: connection refused: nothing listens there", network, addr)
	case upstream.ReasonTimeout:
		return fmt.Sprintf("%s %s: i/o timeout: no answer in time (the process hangs or is overloaded, or a firewall drops the packets)", network, addr)
	default:
		return fmt.Sprintf("%s %s: %v", network, addr, err)
	}
}

func checkBackend(ctx context.Context, cfg Config) Finding {
	f := Finding{Check: "backend " + cfg.Backend}
	g, err := gate.New(gate.Config{Backend: cfg.Backend, ReadyURL: cfg.BackendReadyURL, Timeout: cfg.Timeout}, zap.NewNop(), metrics.NewSet())
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	ok, detail := g.Check(ctx)
	f.OK, f.Detail = ok, detail
	if ok {
		f.Detail = "ready and answering over TCP"
		return f
	}
	// A ready URL that answers "not ready" proves the backend runs, and
	// names the plugin: it comes first, before the DNS probe's refusal
	// (CoreDNS's kubernetes plugin holds the DNS listener back while it
	// waits for the API server).
	switch {
	case strings.Contains(detail, "not ready"):
		f.Fix = "the backend runs but a plugin is not ready (kubernetes: API server unreachable or RBAC; until it syncs the backend may not listen on DNS yet); check its log"
	case strings.Contains(detail, "connection refused"):
		f.Fix = "nothing listens: is nodedns-backend running? kubectl -n kube-system logs <nodedns pod> -c backend; while it is down the frontend answers from its cache and the fallbacks"
	case strings.Contains(detail, "timeout"):
		f.Fix = "the backend accepts but does not answer in time: it hangs or is overloaded (CPU limit?); check its log and coredns_* metrics on :9153"
	default:
		f.Fix = "check the backend's log"
	}
	return f
}

// nameservers reads the nameserver lines of a resolv.conf.
func nameservers(data string) []string {
	var out []string
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, f[1])
		}
	}
	return out
}

// checkResolvConf asks each of the node's resolvers, which the backend
// forwards names outside the cluster to.
func checkResolvConf(cfg Config) []Finding {
	b, err := os.ReadFile(cfg.ResolvConf)
	if err != nil {
		return []Finding{{Check: "upstream resolvers", Detail: err.Error(), Fix: "the backend forwards to the nameservers in " + cfg.ResolvConf + ": make it readable"}}
	}
	ns := nameservers(string(b))
	if len(ns) == 0 {
		return []Finding{{Check: "upstream resolvers", Detail: "no nameserver in " + cfg.ResolvConf, Fix: "add the node's resolvers to " + cfg.ResolvConf}}
	}
	owned := map[string]bool{}
	for _, ip := range cfg.Net.OwnedIPs() {
		owned[ip.String()] = true
	}
	var out []Finding
	for _, s := range ns {
		check := "upstream resolver " + s
		if owned[s] {
			out = append(out, Finding{Check: check, Detail: "is an address nodedns owns: names outside the cluster would loop",
				Fix: "the node's " + cfg.ResolvConf + " must list the real resolvers (kubelet's resolvConf too)"})
			continue
		}
		out = append(out, checkDNS(check, "udp", net.JoinHostPort(s, "53"), cfg.Timeout,
			"the node's resolver does not answer: names outside the cluster fail; fix the node's network or "+cfg.ResolvConf))
	}
	return out
}

func checkConntrack(cfg Config) Finding {
	f := Finding{Check: "conntrack"}
	read := func(name string) (int, error) {
		b, err := os.ReadFile(filepath.Join(cfg.Proc, "sys", "net", "netfilter", name))
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	count, err := read("nf_conntrack_count")
	if errors.Is(err, os.ErrNotExist) {
		f.OK, f.Detail = true, "not loaded (no connection tracking on this node)"
		return f
	}
	limit, err2 := read("nf_conntrack_max")
	if err != nil || err2 != nil || limit <= 0 {
		f.Detail = fmt.Sprint(errors.Join(err, err2))
		return f
	}
	share := float64(count) / float64(limit)
	f.Detail = fmt.Sprintf("%d of %d entries (%.0f%%)", count, limit, 100*share)
	if share >= conntrackFull {
		f.Fix = "the table is nearly full and new connections will be dropped: find the sources (conntrack -L | awk '{print $5}' | sort | uniq -c | sort -n | tail), raise net.netfilter.nf_conntrack_max; nodedns's own queries are NOTRACK and add nothing"
		return f
	}
	f.OK = true
	return f
}

// clusterDNS extracts the clusterDNS list of a KubeletConfiguration in
// JSON (EKS and AKS write JSON) or YAML, in block ("- 10.96.0.10") or flow
// ("[10.96.0.10]") style.
func clusterDNS(data string) []string {
	var js struct {
		ClusterDNS []string `json:"clusterDNS"`
	}
	if strings.HasPrefix(strings.TrimSpace(data), "{") && json.Unmarshal([]byte(data), &js) == nil {
		return js.ClusterDNS
	}
	lines := strings.Split(data, "\n")
	for i, line := range lines {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(key) != "clusterDNS" || strings.HasPrefix(line, " ") {
			continue
		}
		rest = strings.TrimSpace(rest)
		var out []string
		if strings.HasPrefix(rest, "[") {
			for _, v := range strings.Split(strings.Trim(rest, "[]"), ",") {
				if v = strings.Trim(strings.TrimSpace(v), `"'`); v != "" {
					out = append(out, v)
				}
			}
			return out
		}
		for _, l := range lines[i+1:] {
			t := strings.TrimSpace(l)
			if !strings.HasPrefix(t, "-") {
				break
			}
			out = append(out, strings.Trim(strings.TrimSpace(strings.TrimPrefix(t, "-")), `"'`))
		}
		return out
	}
	return nil
}

// KubeletConfigFix says how to let diagnose read kubelet's configuration in
// the nodedns pod, where the chart mounts it only when asked to.
const KubeletConfigFix = "in the nodedns pod, set the chart's frontend.kubeletConfig to the path of kubelet's configuration file on the nodes (kubeadm: /var/lib/kubelet/config.yaml), which mounts it read-only at " + DefaultKubeletConfig + "; on the node, pass --kubelet-config=<that path>"

func checkKubelet(cfg Config) Finding {
	f := Finding{Check: "kubelet clusterDNS"}
	b, err := os.ReadFile(cfg.KubeletConfig)
	if err != nil {
		f.Skipped, f.Detail, f.Fix = true, "kubelet's configuration is not readable here: "+err.Error(), KubeletConfigFix
		return f
	}
	got := clusterDNS(string(b))
	if len(got) == 0 {
		f.Skipped = true
		f.Detail = cfg.KubeletConfig + " sets no clusterDNS: kubelet may take it from its --cluster-dns flag, which diagnose does not read"
		f.Fix = "compare the nameserver of a pod on this node (kubectl exec <pod> -- cat /etc/resolv.conf) with the address the mode needs"
		return f
	}
	want := cfg.Net.LocalIPs
	what := "--local-ip"
	if cfg.Net.Mode != nodenet.ModeLinkLocal && len(cfg.Net.ServiceIPs) > 0 {
		want, what = append(append([]net.IP(nil), cfg.Net.ServiceIPs...), cfg.Net.LocalIPs...), "the kube-dns ClusterIP (--service-ip) or --local-ip"
	}
	for _, g := range got {
		for _, w := range want {
			if ip := net.ParseIP(g); ip != nil && ip.Equal(w) {
				f.OK, f.Detail = true, fmt.Sprintf("%s (%s mode)", strings.Join(got, ", "), cfg.Net.Mode)
				return f
			}
		}
	}
	f.Detail = fmt.Sprintf("%s has clusterDNS %v; %s mode needs %s", cfg.KubeletConfig, got, cfg.Net.Mode, what)
	f.Fix = "set clusterDNS in the kubelet configuration (see docs/modes.md) and restart kubelet; pods created before keep their old resolv.conf until recreated"
	return f
}
