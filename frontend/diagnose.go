package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/frontend/diagnose"
	"github.com/nodedns/nodedns/frontend/nodenet"
)

// diagnose runs `nodedns-frontend diagnose [flags]`: it takes the frontend's
// own flags (pass the DaemonSet's, or --pid=1 in the frontend's container
// to take the running frontend's) plus a few of its own, checks the node's
// DNS as an operator would and prints each finding with its fix. It returns
// 0 when every check holds, 1 when one fails, 2 on a usage error.
func diagnoseCmd(args []string, stdout, stderr io.Writer) int {
	args, err := withProcessFlags(args, "/proc")
	if err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend diagnose: %v\n", err)
		return 2
	}
	var cfg config
	fs := newFlagSet(&cfg, stderr)
	resolv := fs.String("resolv-conf", diagnose.DefaultResolvConf, "diagnose: the node's resolv.conf, whose nameservers the backend forwards to")
	kubelet := fs.String("kubelet-config", diagnose.DefaultKubeletConfig, "diagnose: kubelet's configuration file (YAML or JSON), for clusterDNS; the check is SKIP when it is unreadable (in the pod: the chart's frontend.kubeletConfig mounts it here)")
	timeout := fs.Duration("timeout", diagnose.DefaultTimeout, "diagnose: time allowed for each probe")
	fs.Int("pid", 0, "diagnose: take the flags of the frontend running as this process (1 in its container) first; flags given here override them")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend diagnose: %v\n", err)
		return 2
	}
	dc := diagnose.Config{
		Net: nodenet.Config{
			Mode: nodenet.Mode(cfg.mode), LocalIPs: cfg.localIPs, ServiceIPs: cfg.serviceIPs,
			Interface: cfg.iface, DNSPort: listenPort(cfg.listen), HealthPort: addrPort(cfg.healthAddr),
			Backend: cfg.backend, ReleaseTo: cfg.releaseToIPs(),
		},
		SetupNetwork:    cfg.setupNetwork,
		Listen:          cfg.listen,
		Backend:         cfg.backend,
		BackendReadyURL: cfg.backendReadyURL,
		Fallbacks:       cfg.fallbacks,
		ResolvConf:      *resolv,
		KubeletConfig:   *kubelet,
		Timeout:         *timeout,
	}
	if dc.Net.Mode == nodenet.ModeNodeIP && cfg.setupNetwork {
		// As the frontend computes them (network.go): the table to expect.
		if ifs, err := nodenet.DefaultRouteInterfaces(); err == nil {
			dc.Net.ReleaseSkipInterfaces = ifs
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !diagnose.Write(stdout, diagnose.Run(ctx, dc)) {
		return 1
	}
	return 0
}

// withProcessFlags expands --pid=N (or -pid N) in args into the command-line
// flags of process N, read from procDir/N/cmdline, placed before args so
// that flags given on the diagnose command line win. The frontend's image
// has no shell, so `kubectl exec POD -c frontend -- nodedns-frontend
// diagnose --pid=1` is how an operator runs diagnose with the DaemonSet's
// flags.
func withProcessFlags(args []string, procDir string) ([]string, error) {
	pid := ""
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "pid" {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, errors.New("--pid needs a process ID")
			}
			value = args[i+1]
		}
		pid = value
	}
	if pid == "" {
		return args, nil
	}
	if n, err := strconv.Atoi(pid); err != nil || n <= 0 {
		return nil, fmt.Errorf("--pid=%s: not a process ID", pid)
	}
	raw, err := os.ReadFile(filepath.Join(procDir, pid, "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("--pid=%s: read its command line: %w", pid, err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if len(argv) > 0 && argv[0] != "" && filepath.Base(argv[0]) != "nodedns-frontend" {
		return nil, fmt.Errorf("--pid=%s runs %s, not nodedns-frontend", pid, argv[0])
	}
	if len(argv) < 2 {
		return args, nil
	}
	return append(argv[1:len(argv):len(argv)], args...), nil
}
