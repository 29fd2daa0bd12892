package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/holder"
	"github.com/nodedns/nodedns/frontend/srcpolicy"
	"github.com/nodedns/nodedns/shared/logging"
)

// holdConfig is the command line of `nodedns-frontend hold`.
type holdConfig struct {
	holder        holder.Config
	allowNetworks []string
	logLevel      string
}

// newHoldFlagSet registers the flags of `hold`. README.md's HOLDER section
// is checked against it (holdreadme_test.go).
func newHoldFlagSet(cfg *holdConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("nodedns-frontend hold", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: nodedns-frontend hold --holder-dir=DIR [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.holder.Dir, "holder-dir", "", "`DIR` of the unix socket through which the frontend gives and takes back its sockets (the frontend's --holder-dir)")
	durationVar(fs, &cfg.holder.Timeout, "hold-timeout", holder.DefaultTimeout, "how long the sockets of a frontend that died are kept for the next one (without --relay)")
	fs.Var((*listFlag)(&cfg.holder.Relay), "relay", "`ADDR[,ADDR]` (IP:port) of DNS servers, over TCP, through which the held sockets are answered while no frontend runs (the frontend's --fallback); empty: only held")
	durationVar(fs, &cfg.holder.RelayAfter, "relay-after", holder.DefaultRelayAfter, "how long after a frontend died the holder starts answering its sockets through --relay")
	fs.Var((*listFlag)(&cfg.allowNetworks), "allow-networks", "`CIDR[,CIDR]` of the clients answered through --relay, and the word local (the frontend's --allow-networks, the same policy); others get REFUSED (UDP) or a closed connection (TCP). Empty answers everybody")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "`LEVEL`: debug, info, warn or error")
	return fs
}

// parseHoldConfig parses and validates the arguments of `hold`.
func parseHoldConfig(args []string, out io.Writer) (holdConfig, error) {
	var cfg holdConfig
	fs := newHoldFlagSet(&cfg, io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fs.Usage()
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	if cfg.holder.Dir == "" {
		errs = append(errs, errors.New("--holder-dir: empty"))
	}
	if cfg.holder.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--hold-timeout %v: must be positive", cfg.holder.Timeout))
	}
	for _, a := range cfg.holder.Relay {
		if _, err := netip.ParseAddrPort(a); err != nil {
			errs = append(errs, fmt.Errorf("--relay %q: want IP:port (the holder resolves no name)", a))
		}
	}
	if _, err := srcpolicy.Parse(cfg.allowNetworks, srcpolicy.KernelRouter); err != nil {
		errs = append(errs, fmt.Errorf("--allow-networks: %w", err))
	}
	if cfg.holder.RelayAfter <= 0 {
		errs = append(errs, fmt.Errorf("--relay-after %v: must be positive", cfg.holder.RelayAfter))
	}
	switch cfg.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", cfg.logLevel))
	}
	return cfg, errors.Join(errs...)
}

// holdCmd runs `nodedns-frontend hold`: the socket holder (package
// holder), a process of its own in a container beside the frontend's. It
// returns 0 once stopped by SIGTERM or SIGINT, 1 on a failure, 2 on a
// usage error.
func holdCmd(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseHoldConfig(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend hold: %v\n(nodedns-frontend hold -h lists the flags)\n", err)
		return 2
	}
	signal.Ignore(syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := hold(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend hold: %v\n", err)
		return 1
	}
	return 0
}

// hold runs the holder until ctx ends.
func hold(ctx context.Context, cfg holdConfig) error {
	log, err := logging.New(cfg.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log = log.Named("holder")
	// The frontend's policy, for the relay: route lookups of "local" only
	// while relaying, off the frontend's path.
	sources, err := srcpolicy.Parse(cfg.allowNetworks, srcpolicy.KernelRouter)
	if err != nil {
		return fmt.Errorf("--allow-networks: %w", err)
	}
	go sources.Run(ctx)
	cfg.holder.Sources = sources
	h, err := holder.New(cfg.holder, log)
	if err != nil {
		return err
	}
	start := time.Now()
	err = h.Run(ctx, nil)
	log.Info("stopped", zap.Duration("ran", time.Since(start).Round(time.Second)))
	return err
}
