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
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Usage is the subcommand's synopsis.
const Usage = `usage: nodedns-backend handoff scale-down|restore [flags]

scale-down  once the nodedns DaemonSet runs a ready pod on every schedulable
            Linux node and the DNS Service lists them, scale the CoreDNS
            Deployment down to --keep-replicas (its replicas recorded in the
            annotation ` + ReplicasAnnotation + `); where that is not safe (a partial
            rollout, a Service that does not select nodedns, an autoscaler or
            reconciler that owns it) leave it serving beside nodedns, say why,
            and exit 0
restore     scale the CoreDNS Deployment back to the recorded replicas and wait until it is available;
            with no Deployment, refuse (exit 3) unless --allow-no-dns`

// Main runs `nodedns-backend handoff ARGS...` and returns the exit code:
// 0 done (CoreDNS removed, restored, or left beside nodedns), 1 failed,
// 2 bad usage, RefusalExitCode refused. It logs to stderr, one line per
// step.
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
	fs.StringVar(&h.Namespace, "namespace", "kube-system", "namespace of the Deployment, the DaemonSet and the Service")
	fs.StringVar(&h.Deployment, "deployment", "coredns", "the CoreDNS Deployment")
	fs.StringVar(&h.DaemonSet, "daemonset", "nodedns", "nodedns's DaemonSet")
	fs.StringVar(&h.Service, "service", "kube-dns", "the DNS Service, whose ClusterIP is the pods' nameserver (RKE2: rke2-coredns-rke2-coredns, kubespray: coredns)")
	podPorts := fs.String("pod-ports", "53", "scale-down: comma-separated node ports on which the nodedns pods serve DNS; the Service's port 53 must target one")
	replicas := fs.Int("replicas", 2, "restore: replicas when the Deployment has none recorded")
	keep := fs.Int("keep-replicas", 1, "scale-down: replicas left running, the DNS server of last resort when every nodedns pod is gone without the hooks (never more than the Deployment has); 0 scales it to 0")
	fs.DurationVar(&h.Settle, "settle", DefaultSettle, "scale-down: how long to watch the Deployment for replicas coming back after scaling it to 0")
	fs.DurationVar(&h.Converge, "converge", DefaultConverge, "bound on each wait for the Service's endpoints (scale-down: before it, coexist; after it, scale back; restore: for an endpoint besides nodedns, else fail)")
	fs.BoolVar(&h.OverrideReconciler, "override-reconciler", false, "scale-down: scale down a Deployment marked as an add-on manager's or k3s's (they must leave its replicas alone)")
	fs.BoolVar(&h.AllowNoDNS, "allow-no-dns", false, "restore: succeed when there is no Deployment to restore, or it does not become available")
	timeout := fs.Duration("timeout", 4*time.Minute, "give up after this long")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default: the pod's ServiceAccount (in-cluster)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ports, perr := parsePorts(*podPorts)
	if perr != nil || fs.NArg() > 0 || *replicas < 1 || *keep < 0 || *keep > 1000 || *timeout <= 0 || h.Settle <= 0 || h.Converge <= 0 ||
		h.Namespace == "" || h.Deployment == "" || h.DaemonSet == "" || h.Service == "" {
		fmt.Fprintf(stderr, "handoff %s: bad arguments %q: --replicas, --timeout, --settle and --converge must be positive, --keep-replicas 0 to 1000, names non-empty, --pod-ports ports (1-65535)\n", verb, args[1:])
		return 2
	}
	h.PodPorts = ports
	h.Replicas = int32(*replicas)
	h.Keep = int32(*keep)
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
	return exitCode(run(ctx), verb, *timeout, logger.Printf)
}

// exitCode logs err's outcome and returns Main's exit code for it.
func exitCode(err error, verb string, timeout time.Duration, logf func(string, ...any)) int {
	var co *Coexist
	var ref *Refusal
	switch {
	case err == nil:
		return 0
	case errors.As(err, &co):
		// Not a failure: helm install succeeds with CoreDNS still serving.
		logf("%s: CoreDNS stays, serving beside nodedns: %s", verb, co.Reason)
		return 0
	case errors.As(err, &ref):
		logf("%s refused: %s", verb, ref.Reason)
		return RefusalExitCode
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (--timeout %s)", err, timeout)
	}
	logf("%s failed: %v", verb, err)
	return 1
}

// parsePorts parses --pod-ports: one port or more, comma-separated.
func parsePorts(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("port %q", f)
		}
		out = append(out, int32(n))
	}
	return out, nil
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
