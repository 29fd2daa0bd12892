package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProxyMode is kube-proxy's --proxy-mode.
type ProxyMode string

// The kube-proxy modes that run here (the kernel has no IPVS).
const (
	ProxyModeIPTables ProxyMode = "iptables"
	ProxyModeNFTables ProxyMode = "nftables"
)

// KubeProxy is a kube-proxy running in a node's network namespace.
type KubeProxy struct {
	// Node is the node it runs for.
	Node *Node
	// Mode is its proxy mode.
	Mode ProxyMode
	// LogPath is its log file, kube-proxy-<node>.log in the testbed dir.
	LogPath string

	proc *Process
}

// StartKubeProxy runs the real kube-proxy in node's network namespace, as
// that node, in mode. extraArgs are appended to its flags. It returns once
// the process runs; WaitForRules tells when it has programmed Services. Stop
// (or Testbed.Stop) ends it; the rules it wrote stay in the namespace, which
// is deleted with the testbed when AddNode created it.
func (tb *Testbed) StartKubeProxy(ctx context.Context, node *Node, mode ProxyMode, extraArgs ...string) (*KubeProxy, error) {
	if mode != ProxyModeIPTables && mode != ProxyModeNFTables {
		return nil, fmt.Errorf("kube-proxy mode %q: use iptables or nftables (no IPVS in this kernel)", mode)
	}
	bin, err := Binary("kube-proxy")
	if err != nil {
		return nil, err
	}
	argv := []string{
		"ip", "netns", "exec", node.Netns, bin,
		"--kubeconfig=" + node.Kubeconfig,
		"--hostname-override=" + node.Name,
		"--proxy-mode=" + string(mode),
		// The conntrack table size and TCP timeouts are host-wide sysctls
		// (or need a writable /proc/sys/net/netfilter); 0 leaves them alone.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--v=2",
	}
	argv = append(argv, extraArgs...)
	p, err := StartProcess(tb.Dir, "kube-proxy-"+fileSafe(node.Name), argv, nil)
	if err != nil {
		return nil, err
	}
	kp := &KubeProxy{Node: node, Mode: mode, LogPath: p.logPath, proc: p}
	tb.mu.Lock()
	stopped := tb.stopped
	if !stopped {
		tb.proxies = append(tb.proxies, kp)
	}
	tb.mu.Unlock()
	if stopped {
		return nil, errors.Join(errors.New("start kube-proxy: testbed stopped"), p.Stop())
	}
	return kp, nil
}

// PID returns the process id of kube-proxy (of `ip netns exec`, which
// executes kube-proxy in place).
func (kp *KubeProxy) PID() int { return kp.proc.PID() }

// Stop stops kube-proxy. Safe to call more than once.
func (kp *KubeProxy) Stop() error { return kp.proc.Stop() }

// Rules returns the node namespace's ruleset in the form of kp's mode:
// `iptables-save` for iptables, `nft list ruleset` for nftables.
func (kp *KubeProxy) Rules(ctx context.Context) (string, error) {
	var out []byte
	var err error
	if kp.Mode == ProxyModeNFTables {
		out, err = kp.Node.Run(ctx, "nft", "list", "ruleset")
	} else {
		out, err = kp.Node.Run(ctx, "iptables-save")
	}
	return string(out), err
}

// rulesPollInterval: kube-proxy syncs within a second of a change; polling
// faster would only cost CPU on shared cores.
const rulesPollInterval = 500 * time.Millisecond

// WaitForRules polls Rules until it contains every one of substrings and
// returns that ruleset. It fails early when kube-proxy exits, with its log.
func (kp *KubeProxy) WaitForRules(ctx context.Context, substrings ...string) (string, error) {
	var rules string
	cond := func() (bool, error) {
		var err error
		if rules, err = kp.Rules(ctx); err != nil {
			return false, err
		}
		for _, s := range substrings {
			if !strings.Contains(rules, s) {
				return false, nil
			}
		}
		return true, nil
	}
	t := time.NewTicker(rulesPollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return rules, err
		}
		if ok {
			return rules, nil
		}
		if done, perr := kp.proc.Exited(); done {
			return rules, fmt.Errorf("kube-proxy on %s exited: %v\n%s", kp.Node.Name, perr, kp.proc.LogTail())
		}
		select {
		case <-ctx.Done():
			return rules, fmt.Errorf("wait for kube-proxy (%s) rules %q: %w\n%s", kp.Mode, substrings, ctx.Err(), kp.proc.LogTail())
		case <-t.C:
		}
	}
}
