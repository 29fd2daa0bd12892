// Command nodedns-frontend is the per-node DNS process: it answers pods'
// queries from its cache and sends misses to the local backend over TCP.
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/nodedns/nodedns/frontend/srcpolicy"
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
	if len(args) > 0 && args[0] == "top" {
		return topCmd(args[1:], stdout, stderr)
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
// non-nil, is called once everything listens. Its steps, in order: the
// resolver, the sockets taken over from a running instance or the holder,
// the listeners, serving (node network, HTTP, readiness), then either a
// drain (ctx ended) or a handover to a newer instance.
func run(ctx context.Context, cfg config, started func(listening)) (err error) {
	log, err := logging.New(cfg.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", zap.String("version", version), zap.Strings("listen", cfg.listen),
		zap.String("backend", cfg.backend), zap.Bool("setup_network", cfg.setupNetwork))
	reg := metrics.NewSet()

	pool, res, err := newResolver(cfg, log, reg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pool.Close()) }()
	defer res.Close()

	a := adoptSockets(ctx, cfg, log)
	if a.sup != nil {
		// Past this point, a return without Release leaves the sockets to
		// the holder for the next instance.
		defer func() { _ = a.sup.Close() }()
	}
	// The query log is written at info level whatever --log-level says
	// (asking for it is asking for those lines), each sampled query.
	var qlogger *zap.Logger
	if cfg.queryLog != "" {
		var stopQlog func() error
		qlogger, stopQlog = logging.NewQueryLog()
		qlogger = qlogger.Named("query")
		defer func() { _ = stopQlog() }()
	}
	srv, err := listen(ctx, cfg, res, log, qlogger, reg, a)
	if err != nil {
		return err
	}
	if a.sup != nil {
		// From now on a crash loses no query: the holder keeps the sockets.
		defer supplyHolder(ctx, a.sup, srv)()
	}
	s, err := serve(ctx, cfg, log, reg, pool, srv, a)
	if err != nil {
		return err
	}
	confirmTakeover(ctx, cfg, log, a.succ)
	handedOver, closeHandover := acceptSuccessor(ctx, cfg, log, srv)
	defer closeHandover()
	if started != nil {
		started(listening{DNS: srv.Addrs(), Metrics: s.httpAddrs[0], Health: s.httpAddrs[1]})
	}
	log.Info("ready", zap.Strings("dns", srv.Addrs()), zap.String("metrics", s.httpAddrs[0]), zap.String("health", s.httpAddrs[1]))

	select {
	case <-ctx.Done():
		return drain(cfg, log, s, a.sup)
	case h := <-handedOver:
		s.nw.Leave()
		releaseHolder(log, a.sup)
		return handOver(ctx, cfg, log, srv, h, &s.stopping, s.httpSrv)
	}
}

// newResolver returns the pool of connections to the backend and the
// resolver in front of it. On error nothing is left open.
func newResolver(cfg config, log *zap.Logger, reg *vm.Set) (*upstream.Pool, *resolver.Resolver, error) {
	pool, err := upstream.New(upstream.Config{Backend: cfg.backend, Fallbacks: cfg.fallbacks, MaxInflight: cfg.maxInflight}, log, reg)
	if err != nil {
		return nil, nil, err
	}
	// CoreDNS names a server block by its port ("dns://:53"), whatever it
	// binds; dashboards filter on that.
	_, port, _ := net.SplitHostPort(cfg.listen[0])
	res, err := resolver.New(cfg.resolverConfig(port), pool, reg, log, nil)
	if err != nil {
		return nil, nil, errors.Join(err, pool.Close())
	}
	return pool, res, nil
}

// adoption is what an instance takes over as it starts.
type adoption struct {
	// succ is the handover in progress from a running instance, or nil.
	succ *handover.Successor
	// sup holds the holder's lease, or is nil without --holder-dir.
	sup *holder.Supplier
	// inherited are the sockets to serve, owned by the caller; nil: bind
	// afresh.
	inherited []*os.File
}

// abort gives up a handover in progress: the predecessor keeps serving.
func (a adoption) abort() {
	if a.succ != nil {
		_ = a.succ.Abort()
	}
}

// adoptSockets takes over the sockets of a running instance (the one
// being upgraded), or else those the holder kept since the last instance
// died. Neither is an error: without them the listeners bind afresh.
func adoptSockets(ctx context.Context, cfg config, log *zap.Logger) adoption {
	var a adoption
	// A running instance hands its sockets over: not one query is lost
	// between its last read and this one's first.
	if cfg.handoverDir != "" {
		var err error
		a.succ, a.inherited, err = handover.Receive(ctx, cfg.handoverDir, cfg.listen)
		if err != nil {
			log.Warn("no socket handover; binding afresh", zap.Error(err))
		} else if a.succ != nil {
			log.Info("taking over the sockets of a running instance", zap.Int("sockets", len(a.inherited)))
		}
	}
	// The holder (nodedns-frontend hold, beside this container) kept the
	// sockets of an instance that died: take them back and answer what
	// queued in them. A running predecessor's sockets are the ones served;
	// the holder's lease is taken all the same, so that what it holds is
	// replaced by what this instance serves.
	if cfg.holderDir != "" {
		a.sup = holder.NewSupplier(cfg.holderDir, cfg.listen, log.Named("holder"))
		held, err := a.sup.Take(ctx)
		switch {
		case errors.Is(err, holder.ErrBusy) && a.succ != nil:
			// The predecessor holds the lease of a holder shared with it
			// and releases it once it has handed over; this instance's
			// supplier then takes it.
		case err != nil:
			log.Warn("sockets not taken from the holder; binding afresh", zap.Error(err))
		case a.succ != nil:
			closeFiles(held)
		case len(held) > 0:
			a.inherited = held
			log.Info("taking back the sockets the holder kept since the last instance died", zap.Int("sockets", len(held)))
		}
	}
	return a
}

// listen starts the DNS server on the sockets adopted, binding those
// missing. On error a handover in progress is given up.
//
// qlogger receives the query log (--query-log); nil without it.
func listen(ctx context.Context, cfg config, res *resolver.Resolver, log, qlogger *zap.Logger, reg *vm.Set, a adoption) (*server.Server, error) {
	sources, err := srcpolicy.Parse(cfg.allowNetworks, srcpolicy.KernelRouter)
	if err != nil {
		a.abort()
		return nil, fmt.Errorf("--allow-networks: %w", err)
	}
	go sources.Run(ctx)
	qlog, err := server.ParseQueryLog(cfg.queryLog, cfg.queryLogSample)
	if err != nil {
		a.abort()
		return nil, fmt.Errorf("--query-log: %w", err)
	}
	srv, err := server.New(server.Config{
		QueryLog:             qlog,
		QueryLogger:          qlogger,
		TopTalkers:           cfg.topTalkers,
		Sources:              sources,
		Listen:               cfg.listen,
		MaxInflight:          cfg.maxInflight,
		MaxInflightPerSource: cfg.maxInflightPerSource,
		ShedDelay:            cfg.shedDelay,
		ClusterDomain:        cfg.clusterDomain,
		// The addresses go onto the interface only once the backend is
		// ready (DESIGN.md, "Lifecycle rules"): bind them before that.
		FreeBind:  cfg.setupNetwork,
		Inherited: a.inherited,
		BindRetry: cfg.bindTimeout,
	}, res, log.Named("server"), reg)
	if err != nil {
		a.abort()
		return nil, err
	}
	if err := srv.StartContext(ctx); err != nil {
		a.abort()
		return nil, err
	}
	return srv, nil
}

// supplyHolder keeps the holder supplied with srv's sockets until the
// function it returns is called (which waits for the supplier to stop).
func supplyHolder(ctx context.Context, sup *holder.Supplier, srv *server.Server) (stop func()) {
	supCtx, cancelSup := context.WithCancel(context.WithoutCancel(ctx))
	supDone := make(chan struct{})
	go func() { defer close(supDone); sup.Run(supCtx, srv) }()
	return func() { cancelSup(); <-supDone }
}

// serving is an instance that serves: DNS, node network and HTTP.
type serving struct {
	srv       *server.Server
	nw        network
	httpSrv   []*httpserve.Server
	httpAddrs [2]string // metrics, health; "" when disabled
	// stopping makes the instance unready: set once it drains.
	stopping atomic.Bool
}

// serve starts the node network (the takeover of the node's DNS, which
// waits for the backend in the background) and the metrics and health
// servers. On error the DNS server is shut down and a handover in progress
// given up.
func serve(ctx context.Context, cfg config, log *zap.Logger, reg *vm.Set, pool *upstream.Pool, srv *server.Server, a adoption) (*serving, error) {
	s := &serving{srv: srv}
	nw, g, err := startNetwork(ctx, cfg, log, reg, pool)
	if err != nil {
		a.abort()
		_ = srv.Shutdown(context.Background())
		return nil, err
	}
	s.nw = nw
	// Readiness: serving, the node's DNS taken over (which waits for the
	// backend), and not shutting down. A backend that goes down later does
	// not make the frontend unready: it keeps answering from cache and
	// fallbacks, and /ready's detail says so.
	ready := func() (bool, string) {
		if s.stopping.Load() {
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
	s.httpSrv, s.httpAddrs, err = serveHTTP(ctx, cfg, reg, ready, srv)
	if err != nil {
		a.abort()
		_ = srv.Shutdown(context.Background())
		return nil, err
	}
	if err := nw.Setup(ctx); err != nil {
		log.Error("node network setup", zap.Error(err))
		a.abort()
		_ = srv.Shutdown(context.Background())
		return nil, errors.Join(err, nw.Teardown(context.Background(), func() {}), closeHTTP(s.httpSrv))
	}
	return s, nil
}

// confirmTakeover tells the predecessor, if any, that this instance serves
// its sockets, and logs when it has drained.
func confirmTakeover(ctx context.Context, cfg config, log *zap.Logger, succ *handover.Successor) {
	if succ == nil {
		return
	}
	if err := succ.Ready(); err != nil {
		log.Warn("socket handover", zap.Error(err))
		return
	}
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

// acceptSuccessor waits, with --handover-dir, for a newer instance to take
// srv's sockets over, and sends the handover on the channel it returns.
// stop stops listening for one.
func acceptSuccessor(ctx context.Context, cfg config, log *zap.Logger, srv *server.Server) (handedOver <-chan *handover.Handover, stop func()) {
	ch := make(chan *handover.Handover, 1)
	if cfg.handoverDir == "" {
		return ch, func() {}
	}
	ln, err := handover.Listen(cfg.handoverDir, cfg.listen, log.Named("handover"))
	if err != nil {
		log.Warn("hitless upgrades disabled", zap.Error(err))
		return ch, func() {}
	}
	go func() {
		if h, err := ln.Accept(ctx, srv); err == nil {
			ch <- h
		}
	}()
	return ch, func() { _ = ln.Close() }
}

// drain stops the instance as the last one on the node, or beside a newer
// one that did not take the sockets over: it becomes unready, releases the
// holder, then tears down (network.Teardown) within --shutdown-timeout.
func drain(cfg config, log *zap.Logger, s *serving, sup *holder.Supplier) error {
	log.Info("shutting down", zap.Duration("timeout", cfg.shutdownTimeout), zap.Duration("lameduck", cfg.lameduck))
	s.stopping.Store(true)
	releaseHolder(log, sup)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	// Order: as the last instance on the node, send pods' queries back to
	// kube-proxy's path while still reading; then stop reading and drain,
	// the answers still leaving untracked; then remove the other rules and
	// the interface; then stop serving metrics (network.Teardown).
	var serr error
	terr := s.nw.Teardown(context.WithoutCancel(sctx), func() {
		if serr = s.srv.Shutdown(sctx); serr != nil {
			log.Warn("drain incomplete", zap.Error(serr))
		}
	})
	herr := closeHTTP(s.httpSrv)
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
func serveHTTP(ctx context.Context, cfg config, reg *vm.Set, ready health.Checker, srv *server.Server) ([]*httpserve.Server, [2]string, error) {
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
		{"metrics", cfg.metricsAddr, map[string]httpserve.Handler{"/metrics": metrics.Handler(reg), "/top": topHandler(srv, false), "/top.txt": topHandler(srv, true)}},
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
