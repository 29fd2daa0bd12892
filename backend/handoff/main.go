package handoff

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Usage is the subcommand's synopsis.
const Usage = `usage: nodedns-backend handoff scale-down|restore [flags]

scale-down  wait until the nodedns DaemonSet runs a ready pod on every node,
            then scale the CoreDNS Deployment to 0 (its replicas recorded in
            the annotation ` + ReplicasAnnotation + `)
restore     scale the CoreDNS Deployment back and wait until it is available`

// Main runs `nodedns-backend handoff ARGS...` and returns the exit code:
// 0 done, 1 failed, 2 bad usage. It logs to stderr, one line per step.
func Main(args []string, stderr io.Writer) int {
	logger := log.New(stderr, "handoff: ", log.LstdFlags|log.LUTC)
	if len(args) == 0 || (args[0] != "scale-down" && args[0] != "restore") {
		fmt.Fprintln(stderr, Usage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("handoff "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	h := &Handoff{Logf: logger.Printf}
	fs.StringVar(&h.Namespace, "namespace", "kube-system", "namespace of the Deployment and the DaemonSet")
	fs.StringVar(&h.Deployment, "deployment", "coredns", "the CoreDNS Deployment")
	fs.StringVar(&h.DaemonSet, "daemonset", "nodedns", "nodedns's DaemonSet")
	replicas := fs.Int("replicas", 2, "restore: replicas when the Deployment has none recorded")
	timeout := fs.Duration("timeout", 4*time.Minute, "give up after this long")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default: the pod's ServiceAccount (in-cluster)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *replicas < 1 || *timeout <= 0 || h.Namespace == "" || h.Deployment == "" || h.DaemonSet == "" {
		fmt.Fprintf(stderr, "handoff %s: bad arguments %q: --replicas and --timeout must be positive, names non-empty\n", verb, args[1:])
		return 2
	}
	h.Replicas = int32(*replicas)
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		logger.Printf("%s: %v", verb, err)
		return 1
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Printf("%s: client: %v", verb, err)
		return 1
	}
	h.Client = c
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	run := h.ScaleDown
	if verb == "restore" {
		run = h.Restore
	}
	if err := run(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (--timeout %s)", err, *timeout)
		}
		logger.Printf("%s failed: %v", verb, err)
		return 1
	}
	return 0
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config (run in a pod, or pass --kubeconfig): %w", err)
	}
	return cfg, nil
}
