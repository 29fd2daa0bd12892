package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nodedns/nodedns/frontend/diagnose"
	"github.com/nodedns/nodedns/frontend/nodenet"
)

// diagnose runs `nodedns-frontend diagnose [flags]`: it takes the frontend's
// own flags (pass the DaemonSet's) plus a few of its own, checks the node's
// DNS as an operator would and prints each finding with its fix. It returns
// 0 when every check holds, 1 when one fails, 2 on a usage error.
func diagnoseCmd(args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := newFlagSet(&cfg, stderr)
	resolv := fs.String("resolv-conf", diagnose.DefaultResolvConf, "diagnose: the node's resolv.conf, whose nameservers the backend forwards to")
	kubelet := fs.String("kubelet-config", diagnose.DefaultKubeletConfig, "diagnose: kubelet's configuration file, for clusterDNS (skipped when unreadable)")
	timeout := fs.Duration("timeout", diagnose.DefaultTimeout, "diagnose: time allowed for each probe")
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
			Backend: cfg.backend,
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !diagnose.Write(stdout, diagnose.Run(ctx, dc)) {
		return 1
	}
	return 0
}
