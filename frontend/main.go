// Command nodedns-frontend is the per-node DNS process: it answers pods'
// queries from its cache and sends misses to the local backend over TCP.
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/handover"
	"github.com/nodedns/nodedns/frontend/holder"
	"github.com/nodedns/nodedns/frontend/resolver"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/health"
	"github.com/nodedns/nodedns/shared/httpserve"
	"github.com/nodedns/nodedns/shared/logging"
	"github.com/nodedns/nodedns/shared/metrics"
)

// version is stamped by the Makefile (-ldflags -X main.version=...).
var version = "dev"

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the command with args and returns its exit code: 2 for a
// usage error, 1 for a failure, 0 after a clean shutdown.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "diagnose" {
		return diagnoseCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "hold" {
		return holdCmd(args[1:], stdout, stderr)
	}
	cfg, err := parseConfig(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend: %v\n(nodedns-frontend -h lists the flags)\n", err)
		return 2
	}
	if cfg.version {
		fmt.Fprintln(stdout, "nodedns-frontend", version)
		return 0
	}
	setGCPercent(os.Getenv)
	// SIGHUP's default action ends the process with no drain and no
	// teardown; a closed terminal or a process manager may send it. The
	// frontend has nothing to reload, so it ignores it, as CoreDNS does.
	signal.Ignore(syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, nil); err != nil {
		fmt.Fprintf(stderr, "nodedns-frontend: %v\n", err)
		return 1
	}
	return 0
}

// listening tells a caller of run (tests) where the process serves.
type listening struct {
	DNS     []string // host:port, UDP and TCP
	Metrics string   // host:port, "" when disabled
	Health  string   // host:port, "" when disabled
}

// run serves until ctx ends, then drains and tears down. started, when
// non-nil, is called once everything listens.
func run(ctx context.Context, cfg config, started func(listening)) (err error) {
	log, err := logging.New(cfg.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", zap.String("version", version), zap.Strings("listen", cfg.listen),
		zap.String("backend", cfg.backend), zap.Bool("setup_network", cfg.setupNetwork))
	reg := metrics.NewSet()

	pool, err := upstream.New(upstream.Config{Backend: cfg.backend, Fallbacks: cfg.fallbacks, MaxInflight: cfg.maxInflight}, log, reg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pool.Close()) }()
	// CoreDNS names a server block by its port ("dns://:53"), whatever it
	// binds; dashboards filter on that.
	_, port, _ := net.SplitHostPort(cfg.listen[0])
	res, err := resolver.New(cfg.resolverConfig(port), pool, reg, log, nil)
	if err != nil {
		return err
	}
	defer res.Close()

	// A running instance (the one being upgraded) hands its sockets over:
	// not one query is lost between its last read and this one's first.
	var succ *handover.Successor
	var inherited []*os.File
	if cfg.handoverDir != "" {
		succ, inherited, err = handover.Receive(ctx, cfg.handoverDir, cfg.listen)
		if err != nil {
			log.Warn("no socket handover; binding afresh", zap.Error(err))
		} else if succ != nil {
			log.Info("taking over the sockets of a running instance", zap.Int("sockets", len(inherited)))
		}
	}
	// The holder (nodedns-frontend hold, beside this container) kept the
	// sockets of an instance that died: take them back and answer what
	// queued in them. A running predecessor's sockets are the ones served;
	// the holder's lease is taken all the same, so that what it holds is
	// replaced by what this instance serves.
	var sup *holder.Supplier
	if cfg.holderDir != "" {
		sup = holder.NewSupplier(cfg.holderDir, cfg.listen, log.Named("holder"))
		held, err := sup.Take(ctx)
		switch {
		case errors.Is(err, holder.ErrBusy) && succ != nil:
			// The predecessor holds the lease of a holder shared with it
			// and releases it once it has handed over; this instance's
			// supplier then takes it.
		case err != nil:
			log.Warn("sockets not taken from the holder; binding afresh", zap.Error(err))
		case succ != nil:
			closeFiles(held)
		case len(held) > 0:
			inherited = held
			log.Info("taking back the sockets the holder kept since the last instance died", zap.Int("sockets", len(held)))
		}
		// Past this point, a return without Release leaves the sockets to
		// the holder for the next instance.
		defer func() { _ = sup.Close() }()
	}
	abort := func() {
		if succ != nil {
			_ = succ.Abort()
		}
	}
	srv, err := server.New(server.Config{
		Listen:               cfg.listen,
		MaxInflight:          cfg.maxInflight,
		MaxInflightPerSource: cfg.maxInflightPerSource,
		ShedDelay:            cfg.shedDelay,
		// The addresses go onto the interface only once the backend is
		// ready (DESIGN.md, "Lifecycle rules"): bind them before that.
		FreeBind:  cfg.setupNetwork,
		Inherited: inherited,
		BindRetry: cfg.bindTimeout,
	}, res, log.Named("server"), reg)
	if err != nil {
		abort()
		return err
	}
	if err := srv.StartContext(ctx); err != nil {
		abort()
		return err
	}
	if sup != nil {
		// From now on a crash loses no query: the holder keeps the sockets.
		supCtx, cancelSup := context.WithCancel(context.WithoutCancel(ctx))
		supDone := make(chan struct{})
		go func() { defer close(supDone); sup.Run(supCtx, srv) }()
		defer func() { cancelSup(); <-supDone }()
	}
	nw, g, err := startNetwork(ctx, cfg, log, reg, pool)
	if err != nil {
		abort()
		_ = srv.Shutdown(context.Background())
		return err
	}
	// Readiness: serving, the node's DNS taken over (which waits for the
	// backend), and not shutting down. A backend that goes down later does
	// not make the frontend unready: it keeps answering from cache and
	// fallbacks, and /ready's detail says so.
	var stopping atomic.Bool
	ready := func() (bool, string) {
		if stopping.Load() {
			return false, "shutting down"
		}
		ok, detail := nw.Status()
		if g != nil {
			if bok, bdetail := g.Ready(); !bok {
				detail += "; backend down, serving from cache and fallbacks: " + bdetail
			}
		}
		return ok, detail + "; " + pool.Status().String()
	}
	httpSrv, httpAddrs, err := serveHTTP(ctx, cfg, reg, ready)
	if err != nil {
		abort()
		_ = srv.Shutdown(context.Background())
		return err
	}
	if err := nw.Setup(ctx); err != nil {
		log.Error("node network setup", zap.Error(err))
		abort()
		_ = srv.Shutdown(context.Background())
		return errors.Join(err, nw.Teardown(context.Background(), func() {}), closeHTTP(httpSrv))
	}
	if succ != nil {
		if err := succ.Ready(); err != nil {
			log.Warn("socket handover", zap.Error(err))
		} else {
			go func() {
				wctx, cancel := context.WithTimeout(ctx, cfg.shutdownTimeout+10*time.Second)
				defer cancel()
				if err := succ.Wait(wctx); err != nil {
					log.Warn("predecessor did not confirm its drain", zap.Error(err))
					return
				}
				log.Info("predecessor drained; sockets taken over")
			}()
		}
	}
	handedOver := make(chan *handover.Handover, 1)
	if cfg.handoverDir != "" {
		ln, err := handover.Listen(cfg.handoverDir, cfg.listen, log.Named("handover"))
		if err != nil {
			log.Warn("hitless upgrades disabled", zap.Error(err))
		} else {
			defer ln.Close()
			go func() {
				if h, err := ln.Accept(ctx, srv); err == nil {
					handedOver <- h
				}
			}()
		}
	}
	if started != nil {
		started(listening{DNS: srv.Addrs(), Metrics: httpAddrs[0], Health: httpAddrs[1]})
	}
	log.Info("ready", zap.Strings("dns", srv.Addrs()), zap.String("metrics", httpAddrs[0]), zap.String("health", httpAddrs[1]))

	select {
	case <-ctx.Done():
	case h := <-handedOver:
		nw.Leave()
		releaseHolder(log, sup)
		return handOver(ctx, cfg, log, srv, h, &stopping, httpSrv)
	}
	log.Info("shutting down", zap.Duration("timeout", cfg.shutdownTimeout), zap.Duration("lameduck", cfg.lameduck))
	stopping.Store(true)
	releaseHolder(log, sup)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	// Order: as the last instance on the node, send pods' queries back to
	// kube-proxy's path while still reading; then stop reading and drain,
	// the answers still leaving untracked; then remove the other rules and
	// the interface; then stop serving metrics (network.Teardown).
	var serr error
	terr := nw.Teardown(context.WithoutCancel(sctx), func() {
		if serr = srv.Shutdown(sctx); serr != nil {
			log.Warn("drain incomplete", zap.Error(serr))
		}
	})
	herr := closeHTTP(httpSrv)
	log.Info("stopped")
	return errors.Join(terr, herr)
}

// handOver finishes a handover on the old instance: a successor serves the
// sockets now. The HTTP listeners close first so that probes reach only the
// successor; then the queries already read are answered. The node network
// stays: the successor owns it. The process then idles until it is told to
// stop, because an exit would make Kubernetes restart the old pod, which
// would take the sockets back.
func handOver(ctx context.Context, cfg config, log *zap.Logger, srv *server.Server, h *handover.Handover,
	stopping *atomic.Bool, httpSrv []*httpserve.Server) error {
	log.Info("a newer instance took the sockets over; draining")
	stopping.Store(true)
	srv.StopReading()
	herr := closeHTTP(httpSrv)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain incomplete", zap.Error(err))
	}
	if err := h.Done(); err != nil {
		log.Warn("handover done", zap.Error(err))
	}
	log.Info("handed over; idle until stopped")
	<-ctx.Done()
	log.Info("stopped")
	return herr
}

// releaseHolder tells the holder, if any, that this instance stops
// cleanly: its sockets go to a successor or are closed, and the holder's
// copies must not outlive them.
func releaseHolder(log *zap.Logger, sup *holder.Supplier) {
	if sup == nil {
		return
	}
	if err := sup.Release(); err != nil {
		log.Warn("holder release", zap.Error(err))
	}
}

// closeFiles closes files not used.
func closeFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// serveHTTP starts the metrics and health servers (each skipped when its
// address is empty) on SO_REUSEPORT listeners, so that a second instance
// during a surge upgrade can bind the same ports, counting in reg the
// connections each evicts and refuses at its limits. It returns the servers
// and their bound addresses (metrics, health).
func serveHTTP(ctx context.Context, cfg config, reg *vm.Set, ready health.Checker) ([]*httpserve.Server, [2]string, error) {
	const (
		evictedFamily = metrics.Namespace + "_http_connections_evicted_total"
		refusedFamily = metrics.Namespace + "_http_connections_refused_total"
	)
	metrics.Help(evictedFamily, "HTTP connections closed to make room for a new one, by listener and by the limit reached (peer or listener).")
	metrics.Help(refusedFamily, "New HTTP connections closed at once because every slot they could take was serving, by listener and limit.")
	var srvs []*httpserve.Server
	var addrs [2]string
	for i, h := range []struct {
		name   string // the listener label
		addr   string
		routes map[string]httpserve.Handler
	}{
		{"metrics", cfg.metricsAddr, map[string]httpserve.Handler{"/metrics": metrics.Handler(reg)}},
		{"health", cfg.healthAddr, health.Routes(ready)},
	} {
		if h.addr == "" {
			continue
		}
		var m httpserve.Metrics
		for lim := range httpserve.NumLimits {
			m.Evicted[lim] = reg.NewCounter(metrics.Name(evictedFamily, "listener", h.name, "limit", lim.String()))
			m.Refused[lim] = reg.NewCounter(metrics.Name(refusedFamily, "listener", h.name, "limit", lim.String()))
		}
		l, err := server.ListenReusePort(ctx, h.addr)
		if err != nil {
			return nil, addrs, errors.Join(err, closeHTTP(srvs))
		}
		srvs = append(srvs, httpserve.ServeCounted(l, h.routes, m))
		addrs[i] = l.Addr().String()
	}
	return srvs, addrs, nil
}

func closeHTTP(srvs []*httpserve.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var errs []error
	for _, s := range srvs {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
