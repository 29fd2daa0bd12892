// Command nodedns-testbed runs the testbed's etcd and kube-apiserver in the
// foreground until interrupted, for poking at the control plane by hand:
//
//	make testbed      # or: go run ./testbed/cmd/nodedns-testbed
//	kubectl --kubeconfig <printed path> get ns
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/testbed"
)

func main() {
	var (
		dir  = flag.String("dir", "", "directory for certificates, kubeconfigs and logs (default: a temporary directory, removed on exit)")
		bind = flag.String("bind-address", "127.0.0.1", "address kube-apiserver listens on")
		port = flag.Int("port", 0, "kube-apiserver secure port (0: a free port)")
		wait = flag.Duration("start-timeout", 2*time.Minute, "how long to wait for kube-apiserver to be ready")
	)
	flag.Parse()
	ip := net.ParseIP(*bind)
	if ip == nil {
		log.Fatalf("--bind-address=%q is not an IP address", *bind)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, testbed.Options{Dir: *dir, BindAddress: ip, Port: *port, StartTimeout: *wait, Logf: log.Printf}); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, opts testbed.Options) (err error) {
	tb, err := testbed.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tb.Stop()) }()

	fmt.Printf(`kube-apiserver %s: %s
kubeconfig (admin): %s
logs:               %s

  export KUBECONFIG=%s
  kubectl get namespaces

Ctrl-C stops etcd and kube-apiserver (and removes the directory if it is a temporary one).
`, testbed.KubernetesVersion, tb.URL(), tb.Kubeconfig, tb.Dir, tb.Kubeconfig)
	<-ctx.Done()
	log.Print("stopping")
	return nil
}
