package nodenet

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
)

// IPTables is the part of github.com/coreos/go-iptables that nodedns uses,
// for one family. Unit tests use a fake.
type IPTables interface {
	Exists(table, chain string, spec ...string) (bool, error)
	Insert(table, chain string, pos int, spec ...string) error
	Delete(table, chain string, spec ...string) error
	// List returns the chain as `iptables -S` prints it: "-P"/"-N" lines
	// then one "-A CHAIN ..." line per rule, in order.
	List(table, chain string) ([]string, error)
}

// Backend is the iptables implementation the host's rules live in.
type Backend string

// Backends.
const (
	BackendLegacy Backend = "legacy"
	BackendNFT    Backend = "nft"
)

// xtablesWait bounds how long an iptables command waits for the xtables
// lock (-w) that kube-proxy and kubelet also take: longer than their usual
// iptables-restore, shorter than a sync interval.
const xtablesWait = 5 // seconds

// NewIPTables returns go-iptables for family, running the binary of
// backend (iptables-legacy / iptables-nft, ip6tables-...). Every command
// waits for the xtables lock.
func NewIPTables(backend Backend, family Family) (IPTables, error) {
	proto := iptables.ProtocolIPv4
	bin := "iptables-" + string(backend)
	if family == IPv6 {
		proto = iptables.ProtocolIPv6
		bin = "ip6tables-" + string(backend)
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(bin), iptables.Timeout(xtablesWait))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	return ipt, nil
}

// Runner runs a command and returns its standard output. Tests inject one.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command with os/exec.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// hintChains are created by kubelet and kube-proxy in the iptables backend
// they use, precisely so that other components can tell which one it is.
var hintChains = []string{":KUBE-IPTABLES-HINT", ":KUBE-KUBELET-CANARY"}

// BackendStats is what DetectBackend saw.
type BackendStats struct {
	Hint  bool // a kubelet/kube-proxy hint chain exists
	Rules int  // rules that are not nodedns's own
	// Denied: a save command failed for want of privilege
	// (iptables-legacy without CAP_NET_RAW); its rules are unknown.
	Denied bool
}

// DetectBackend tells which iptables backend the host uses, as the
// kubernetes-sigs iptables-wrapper does: the backend holding kubelet's or
// kube-proxy's hint chains wins; otherwise the one with more rules (not
// counting nodedns's own, so that a choice made once is not self-fulfilling);
// nft on a tie, as on current distributions. A save command that is missing
// counts as an empty backend.
func DetectBackend(ctx context.Context, run Runner) (Backend, map[Backend]BackendStats) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stats := map[Backend]BackendStats{}
	for _, b := range []Backend{BackendNFT, BackendLegacy} {
		var st BackendStats
		for _, bin := range []string{"iptables-" + string(b) + "-save", "ip6tables-" + string(b) + "-save"} {
			out, err := run(ctx, bin)
			if err != nil && strings.Contains(err.Error(), "Permission denied") {
				st.Denied = true
			}
			for _, line := range strings.Split(string(out), "\n") {
				for _, h := range hintChains {
					if strings.HasPrefix(line, h+" ") {
						st.Hint = true
					}
				}
				if strings.HasPrefix(line, "-A ") && !strings.Contains(line, CommentPrefix) {
					st.Rules++
				}
			}
		}
		stats[b] = st
	}
	nft, legacy := stats[BackendNFT], stats[BackendLegacy]
	switch {
	case nft.Hint:
		return BackendNFT, stats
	case legacy.Hint:
		return BackendLegacy, stats
	case legacy.Rules > nft.Rules:
		return BackendLegacy, stats
	default:
		return BackendNFT, stats
	}
}
