// Command nodedns-apicost measures what a nodedns backend on every node
// costs the Kubernetes API server, against kube-proxy's watches on every
// node, on the testbed (real etcd and kube-apiserver; see
// docs/apiserver-cost.md). It prints Markdown tables.
//
//	nodedns-apicost [flags]                  the study
//	nodedns-apicost kube-proxy-watch [flags] one node's kube-proxy watch set (started by the study)
//	nodedns-apicost simulate-watchers [flags] many simulated nodes of one design (started by the study)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/nodedns/nodedns/apicost"
)

// watchSubcommand is the subcommand the study starts once per node.
const watchSubcommand = "kube-proxy-watch"

// simSubcommand is the subcommand the study starts once per simulated fleet.
const simSubcommand = "simulate-watchers"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == watchSubcommand {
		err = runWatch(ctx, os.Args[2:])
	} else if len(os.Args) > 1 && os.Args[1] == simSubcommand {
		err = runSim(ctx, os.Args[2:])
	} else {
		err = runStudy(ctx, os.Args[1:])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "nodedns-apicost:", err)
		os.Exit(1)
	}
}

func runStudy(ctx context.Context, args []string) error {
	cfg := apicost.DefaultConfig()
	fs := flag.NewFlagSet("nodedns-apicost", flag.ContinueOnError)
	nodes := fs.String("nodes", joinInts(cfg.Nodes), "simulated node counts, ascending; the last also gets the bursts")
	fs.IntVar(&cfg.Services, "services", cfg.Services, "ClusterIP Services, one EndpointSlice each")
	fs.IntVar(&cfg.EndpointsPerService, "endpoints", cfg.EndpointsPerService, "endpoints per Service")
	fs.IntVar(&cfg.ChurnEndpoints, "churn-endpoints", cfg.ChurnEndpoints, "endpoints of the rolling Deployment (0: no churn)")
	fs.DurationVar(&cfg.ChurnInterval, "churn-interval", cfg.ChurnInterval, "one endpoint replaced every interval")
	fs.BoolVar(&cfg.CompareAll, "compare-all", cfg.CompareAll, "also measure the backends with endpointslices all (the kubernetes plugin's full watch) at each node count")
	fs.BoolVar(&cfg.ChurnKinds, "churn-kinds", cfg.ChurnKinds, "at the largest node count, also roll a headless and a selector-less Service's slice")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "wait after processes synced, before a window")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "steady-state window")
	fs.DurationVar(&cfg.BurstWindow, "burst-window", cfg.BurstWindow, "window after a rollout or an API server restart")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "bound on the wait for a fleet to sync")
	fs.StringVar(&cfg.BackendBinary, "backend", cfg.BackendBinary, "nodedns-backend binary")
	fs.BoolVar(&cfg.WatchList, "watchlist", cfg.WatchList, "compare client-go streaming lists off and on for the backends' rollout and relist")
	fs.BoolVar(&cfg.RestartBaselines, "restart-baselines", cfg.RestartBaselines, "also restart the API server with only kube-proxy's watches and with none")
	fs.BoolVar(&cfg.Calibrate, "calibrate", cfg.Calibrate, "compare the watches of one real kube-proxy with one kube-proxy-watch process (root)")
	simulate := fs.String("simulate", "", "simulated node counts, ascending (e.g. 1000,5000): each design's watchers in one process per count, instead of the process windows")
	fs.IntVar(&cfg.SimCalibrate, "sim-calibrate", cfg.SimCalibrate, "with -simulate: real agents against simulated nodes of each design at this node count (0: none)")
	fs.IntVar(&cfg.SimRamp, "sim-ramp", cfg.SimRamp, "with -simulate: simulated nodes started at once (0: all)")
	fs.StringVar(&cfg.Plot, "plot", "", "with -simulate: write the figure (PNG) to this file")
	out := fs.String("out", "", "also write the tables to this file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.Nodes, err = parseInts(*nodes); err != nil {
		return fmt.Errorf("-nodes: %w", err)
	}
	if *simulate != "" {
		if cfg.Simulate, err = parseInts(*simulate); err != nil {
			return fmt.Errorf("-simulate: %w", err)
		}
	}
	if cfg.WatchCommand, err = apicost.SelfWatchCommand(watchSubcommand); err != nil {
		return err
	}
	if cfg.SimCommand, err = apicost.SelfWatchCommand(simSubcommand); err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.Ltime)
	if !*quiet {
		cfg.Logf = logger.Printf
	}
	cfg.Out = os.Stdout
	var file *os.File
	if *out != "" {
		if file, err = os.Create(*out); err != nil {
			return err
		}
		cfg.Out = io.MultiWriter(os.Stdout, file)
	}
	_, err = apicost.Run(ctx, cfg)
	if file != nil {
		err = errors.Join(err, file.Close())
	}
	return err
}

func runWatch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(watchSubcommand, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the node's kube-proxy")
	node := fs.String("node", "", "Node name (kube-proxy's --hostname-override)")
	synced := fs.String("synced-file", "", "created once the informers synced")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *node == "" {
		return errors.New(watchSubcommand + ": --kubeconfig and --node are required")
	}
	return apicost.RunProxyWatch(ctx, *kubeconfig, *node, *synced)
}

func runSim(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(simSubcommand, flag.ContinueOnError)
	var o apicost.SimOptions
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the design's identity")
	design := fs.String("design", "", "kube-proxy, coredns-ds or nodedns")
	fs.IntVar(&o.First, "first", 0, "first node's index (Node node-NNN)")
	fs.IntVar(&o.Nodes, "nodes", 1, "simulated nodes")
	fs.IntVar(&o.Ramp, "ramp", 0, "nodes started at once; the next batch starts when they synced (0: all)")
	fs.StringVar(&o.StatusFile, "status-file", "", "rewritten every 500ms: synced nodes, lists, events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Kubeconfig == "" {
		return errors.New(simSubcommand + ": --kubeconfig is required")
	}
	var err error
	if o.Design, err = apicost.ParseDesign(*design); err != nil {
		return err
	}
	return apicost.RunSimWatchers(ctx, o)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
