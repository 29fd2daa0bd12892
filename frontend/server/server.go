// Package server owns the frontend's DNS sockets: UDP (several SO_REUSEPORT
// sockets per address, recvmmsg/sendmmsg batches) and TCP (RFC 7766) on every
// listen address. Everything DNS is left to a Handler.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
)

// ErrStarted is returned by Start on a Server that was already started.
var ErrStarted = errors.New("server already started")

// Server serves a Handler over UDP and TCP. Create it with New, then Start;
// Shutdown stops it.
type Server struct {
	cfg Config        // with defaults applied
	h   Handler       // always non-nil
	hc  ClientHandler // h, when it implements ClientHandler; else nil
	// obs records queries for the query log and the top talkers; nil
	// when both are off, and then a query pays only that nil check.
	obs *observer
	log *zap.Logger // always non-nil
	m   *serverMetrics

	inflight atomic.Int64 // misses running; bounded by missLimit
	// missLimit bounds inflight: cfg.MaxInflight, lower while the UDP
	// sockets' queues stand (shed.go); shedNext is when it may move next.
	missLimit, shedNext atomic.Int64
	// missesStarted counts the misses admitted; shedStarted is its value when
	// the limit last moved.
	missesStarted, shedStarted atomic.Int64
	// standingSince is when the UDP queues began to stand (unix ns, 0:
	// they do not); standingAt is when a reader last closed a window
	// whose queue stood; readStart is when the readers started (shed.go).
	standingSince, standingAt atomic.Int64
	readStart                 int64
	tcpCount                  atomic.Int64 // open TCP connections; bounded by cfg.MaxTCPConns
	// sources holds each client's misses in flight and TCP connections,
	// bounded by cfg.MaxInflightPerSource and cfg.MaxTCPConnsPerSource.
	// Misses and TCP accepts use it; cache hits never do.
	sources sourceTable
	// domains holds the misses in flight per domain, bounded by
	// cfg.MaxInflightPerDomain (domains.go); local lists the node's own
	// addresses, shared by many clients (shared.go).
	domains  *domainTable
	local    *localAddrs
	stopping atomic.Bool // set once by StopReading

	// slowCtx is passed to ServeSlow; cancelled shortly before Shutdown's
	// context ends when misses are still in flight (shutdownCut).
	slowCtx    context.Context
	slowCancel context.CancelFunc

	jobs sync.Pool // *missJob
	// bigBufs holds maxMessage-sized buffers (*[]byte) for TCP hits, so
	// that an idle connection does not pin 64 KiB.
	bigBufs sync.Pool
	// reqBufs holds maxTCPRequest-sized buffers (*[maxTCPRequest]byte),
	// taken for the read of one TCP query and put back once it is handled,
	// so that an idle connection holds no request buffer.
	reqBufs sync.Pool

	readers sync.WaitGroup // UDP readers, accept loops, TCP connections
	misses  sync.WaitGroup // UDP misses (TCP ones are waited for by their connection)

	mu        sync.Mutex // guards the fields below
	started   bool
	udp       []*udpSocket
	tcp       []net.Listener
	conns     map[*tcpConn]struct{}
	addrs     []string
	closeOnce sync.Once
}

// New returns a Server for cfg that answers with h. Its series are created
// in set. It binds nothing: Start does.
func New(cfg Config, h Handler, log *zap.Logger, set *vm.Set) (*Server, error) {
	if h == nil {
		return nil, errors.New("server: nil handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{
		cfg:   cfg.withDefaults(),
		h:     h,
		log:   log,
		m:     newMetrics(set),
		conns: make(map[*tcpConn]struct{}),
	}
	s.hc, _ = h.(ClientHandler)
	qlog := cfg.QueryLogger
	if qlog == nil {
		qlog = log.Named("query")
	}
	s.obs = newObserver(s.cfg.QueryLog, s.cfg.TopTalkers, qlog)
	s.domains = newDomainTable()
	s.local = newLocalAddrs(s.cfg.Listen)
	s.missLimit.Store(int64(s.cfg.MaxInflight))
	set.NewGauge(limitFamily, func() float64 { return float64(s.missLimit.Load()) })
	s.slowCtx, s.slowCancel = context.WithCancel(context.Background())
	s.jobs.New = func() any { return newMissJob(s) }
	s.bigBufs.New = func() any { b := make([]byte, 0, maxMessage); return &b }
	s.reqBufs.New = func() any { return new([maxTCPRequest]byte) }
	return s, nil
}

// BindRetryInterval is the pause between two binds of an address in use
// while Config.BindRetry lasts.
const BindRetryInterval = 100 * time.Millisecond

// Start is StartContext with a context that is never cancelled.
func (s *Server) Start() error { return s.StartContext(context.Background()) }

// StartContext binds (or adopts from Config.Inherited) every listen
// address over UDP and TCP and starts serving. An address in use is tried
// again for Config.BindRetry, or until ctx ends. On failure nothing stays
// bound and the error names the address.
func (s *Server) StartContext(ctx context.Context) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	s.started = true
	defer func() {
		if err != nil {
			s.closeSockets()
		}
	}()
	inh, err := adoptInherited(s.cfg.Inherited)
	if err != nil {
		return err
	}
	defer inh.closeUnused(s.log)
	for _, a := range s.cfg.Listen {
		addr, err := s.bindRetrying(ctx, a, inh)
		if err != nil {
			return err
		}
		s.addrs = append(s.addrs, addr)
	}
	s.readStart = time.Now().UnixNano()
	go s.local.keepFresh(s.slowCtx)
	if s.obs != nil {
		go s.obs.run(s.slowCtx.Done())
	}
	for _, u := range s.udp {
		s.readers.Add(1)
		go u.serve()
	}
	for _, l := range s.tcp {
		s.readers.Add(1)
		go s.acceptLoop(l)
	}
	s.log.Info("serving", zap.Strings("addrs", s.addrs), zap.Int("udp_sockets_per_addr", s.cfg.UDPSockets))
	return nil
}

// bindRetrying is bind, tried again every BindRetryInterval while the
// address is in use (EADDRINUSE), for at most Config.BindRetry.
func (s *Server) bindRetrying(ctx context.Context, a string, inh *inherited) (string, error) {
	start := time.Now()
	waited := false
	for {
		addr, err := s.bind(a, inh)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || s.cfg.BindRetry <= 0 {
			if err == nil && waited {
				s.log.Info("bound the address once its holder released it", zap.String("addr", addr), zap.Duration("waited", time.Since(start)))
			}
			return addr, err
		}
		if time.Since(start) >= s.cfg.BindRetry {
			return "", fmt.Errorf("%w (still in use after %s)", err, s.cfg.BindRetry)
		}
		if !waited {
			waited = true
			s.log.Warn("address in use by another process; retrying until it is released",
				zap.String("addr", a), zap.Duration("for_at_most", s.cfg.BindRetry), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-time.After(BindRetryInterval):
		}
	}
}

// bind opens the UDP sockets and the TCP listener of one address. Port 0
// picks a port free for both transports.
func (s *Server) bind(a string, inh *inherited) (string, error) {
	ua, err := parseAddr(a)
	if err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		addr, err := s.bindOnce(ua, inh)
		if err == nil || ua.Port != 0 || attempt >= 10 {
			if err != nil {
				return "", fmt.Errorf("listen %s: %w", a, err)
			}
			return addr, nil
		}
	}
}

func (s *Server) bindOnce(ua *net.UDPAddr, inh *inherited) (string, error) {
	ctx := context.Background()
	lc := listenConfig(s.cfg.FreeBind)
	var socks []*udpSocket
	fail := func(err error) (string, error) {
		for _, u := range socks {
			_ = u.conn.Close()
		}
		return "", err
	}
	port := ua.Port
	for _, pc := range inh.takeUDP(ua) {
		u, err := newUDPSocket(s, pc)
		if err != nil {
			_ = pc.Close()
			return fail(err)
		}
		port = pc.LocalAddr().(*net.UDPAddr).Port
		socks = append(socks, u)
	}
	for len(socks) < s.cfg.UDPSockets {
		bindAt := net.JoinHostPort(ua.IP.String(), fmt.Sprint(port))
		pc, err := lc.ListenPacket(ctx, family(ua.IP, "udp"), bindAt)
		if err != nil {
			return fail(fmt.Errorf("udp: %w", err))
		}
		u, err := newUDPSocket(s, pc.(*net.UDPConn))
		if err != nil {
			_ = pc.Close()
			return fail(err)
		}
		port = pc.LocalAddr().(*net.UDPAddr).Port
		socks = append(socks, u)
	}
	bound := net.JoinHostPort(ua.IP.String(), fmt.Sprint(port))
	var l net.Listener
	if t := inh.takeTCP(&net.UDPAddr{IP: ua.IP, Port: port}); t != nil {
		l = t
	} else {
		var err error
		if l, err = lc.Listen(ctx, family(ua.IP, "tcp"), bound); err != nil {
			return fail(fmt.Errorf("tcp: %w", err))
		}
	}
	s.udp = append(s.udp, socks...)
	s.tcp = append(s.tcp, l)
	return bound, nil
}

// Addrs returns the bound addresses (host:port, the same port for UDP and
// TCP) in the order of Config.Listen, with port 0 resolved.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Files returns duplicates of every open socket (UDP sockets and TCP
// listeners) for a newer instance to serve through Config.Inherited. The
// caller owns (and closes) the files.
func (s *Server) Files() ([]*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var files []*os.File
	for _, u := range s.udp {
		f, err := u.conn.File()
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("dup udp %s: %w", u.local, err)
		}
		files = append(files, f)
	}
	for _, l := range s.tcp {
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("dup tcp %s: %w", l.Addr(), err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// StopReading stops reading queries and accepting connections without
// closing any socket: queries already read are still answered, queries not
// yet read stay queued in the kernel for whoever else reads the socket (a
// newer instance holding the same sockets). Shutdown calls it.
func (s *Server) StopReading() {
	if s.stopping.Swap(true) {
		return
	}
	past := time.Unix(1, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.udp {
		_ = u.conn.SetReadDeadline(past)
	}
	for _, l := range s.tcp {
		_ = l.(*net.TCPListener).SetDeadline(past)
	}
	for c := range s.conns {
		_ = c.conn.SetReadDeadline(past)
	}
}

// Shutdown stops reading, waits for the queries in flight to be answered
// and closes every socket. When ctx is about to end first (shutdownCut
// before its deadline, or when it is cancelled), the misses still running
// have their context cancelled, which makes the handler answer them at
// once (stale or SERVFAIL), and their answers are written until ctx ends;
// then TCP connections are closed, and an error wrapping ctx's is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopReading()
	done := make(chan struct{})
	go func() {
		s.readers.Wait()
		s.misses.Wait()
		close(done)
	}()
	cut := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		cut, cancel = context.WithDeadline(ctx, d.Add(-min(shutdownCut, time.Until(d)/2)))
		defer cancel()
	}
	var err error
	select {
	case <-done:
	case <-cut.Done():
		err = fmt.Errorf("shutdown: %d queries still in flight, answered without waiting any longer: %w", s.inflight.Load(), cut.Err())
		s.slowCancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
		s.mu.Lock()
		for c := range s.conns {
			_ = c.conn.Close()
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.closeSockets()
	s.mu.Unlock()
	s.slowCancel()
	return err
}

// shutdownCut is how long before Shutdown's deadline the misses still
// waiting are cancelled: time for the handler to answer them and for the
// answers to be written before the sockets close, which takes
// microseconds unless the node is starved of CPU.
const shutdownCut = 100 * time.Millisecond

// closeSockets closes every socket. s.mu must be held.
func (s *Server) closeSockets() {
	s.closeOnce.Do(func() {
		for _, u := range s.udp {
			_ = u.conn.Close()
		}
		for _, l := range s.tcp {
			_ = l.Close()
		}
	})
}

// acquire takes an in-flight slot for a miss req of the client src: one
// of the server's, one of the client's share and one of the share of the
// question's domain (domains.go), whose key it returns for release. false
// means overloaded; the refusal is counted by reason.
//
// Past a limit lowered for a standing queue (shed.go), a client is still
// admitted while it holds less than an equal share of that limit among
// the clients holding misses: the pod that floods the node with new
// names holds far more and is refused, the other pods' few misses go on
// being resolved. The share is never under minShare, the two queries
// (A and AAAA) that a pod's resolver sends at once for each name it
// tries: with a share of one, the second of the pair is refused and the
// lookup fails. What the clients under their share add thus stays under
// the limit or under minShare misses each.
func (s *Server) acquire(src srcKey, req []byte) (domKey, bool) {
	n := s.inflight.Add(1)
	if n > int64(s.cfg.MaxInflight) {
		s.inflight.Add(-1)
		s.refuse(refusedInflightTotal)
		return domKey{}, false
	}
	most, reason := s.cfg.MaxInflightPerSource, refusedInflightSource
	if s.local.has(src) {
		most = max(most, s.cfg.MaxInflight/sharedShareDiv)
	}
	if limit := s.missLimit.Load(); n > limit {
		if share := max(minShare, int(limit/max(1, s.sources.missClients.Load()))); share < most {
			most, reason = share, refusedQueueDelay
		}
	}
	if !s.sources.take(src, srcMisses, most) {
		s.inflight.Add(-1)
		s.refuse(reason)
		return domKey{}, false
	}
	dom, inCluster := s.domains.key(req, s.cfg.ClusterDomain)
	share := s.cfg.MaxInflightPerDomain
	if inCluster && time.Now().UnixNano()-s.readStart < s.cfg.shedArmAfter.Nanoseconds() {
		// A restart's backlog, read into a cold cache, holds every
		// name the node's pods asked in the last second through their
		// first search domain, their namespace: more distinct questions
		// than its share, none slow (the backend answers them from
		// memory). For the start window (shedArmAfter, as for shedding)
		// the cluster domain's namespaces are bounded by the source and
		// node shares only; other domains keep their share.
		share = s.cfg.MaxInflight
	}
	if !s.domains.take(dom, share) && !s.underMinShare(src, dom) {
		s.sources.give(src, srcMisses)
		s.inflight.Add(-1)
		s.refuse(refusedInflightDomain)
		return domKey{}, false
	}
	s.missesStarted.Add(1)
	s.m.inflight.Inc()
	return dom, true
}

// minShare is the fewest misses in flight acquire lets a client hold
// past a lowered limit or past its domain's share.
const minShare = 2

// underMinShare admits, past the share of its domain, the miss of a
// client that holds no more than minShare misses with it (one lookup's A
// and AAAA): a pod's lookup under a domain that another client floods
// with new names is resolved, as past a limit lowered for a standing
// queue, while the flooding client, which holds more, is refused. The
// domain's count takes it, so that it is given back on release.
func (s *Server) underMinShare(src srcKey, dom domKey) bool {
	if s.sources.held(src).misses > minShare {
		return false
	}
	return s.domains.take(dom, s.cfg.MaxInflight)
}

// release gives back the slots acquire took for src and dom.
func (s *Server) release(src srcKey, dom domKey) {
	s.domains.give(dom)
	s.sources.give(src, srcMisses)
	s.inflight.Add(-1)
	s.m.inflight.Dec()
}

// refuse counts a refusal for capacity.
func (s *Server) refuse(r refusal) {
	s.m.refused[r].Inc()
	switch r {
	case refusedInflightTotal, refusedInflightSource, refusedQueueDelay, refusedInflightDomain:
		s.m.overloaded.Inc()
	default:
		s.m.tcpRejected.Inc()
	}
}

// serveFast calls the handler's ServeFast; a panic or a response that no
// transport can carry becomes SERVFAIL.
func (s *Server) serveFast(dst, req []byte, p Proto) (resp []byte, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(r, req)
			resp, ok = servfail(dst, req), true
		}
	}()
	resp, ok = s.h.ServeFast(dst, req, p)
	if len(resp) > maxMessage {
		resp = servfail(dst, req)
	}
	return resp, ok
}

// serveSlow calls the handler's ServeSlow (ServeSlowFrom when it has it,
// telling it the client src) with the same protections.
func (s *Server) serveSlow(dst, req []byte, p Proto, src srcKey) (resp []byte) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(r, req)
			resp = servfail(dst, req)
		}
	}()
	if s.hc != nil {
		resp = s.hc.ServeSlowFrom(s.slowCtx, dst, req, p, netip.AddrFrom16(src).Unmap())
	} else {
		resp = s.h.ServeSlow(s.slowCtx, dst, req, p)
	}
	if len(resp) > maxMessage {
		resp = servfail(dst, req)
	}
	return resp
}

// overloaded calls the handler's Overloaded with the same protections.
func (s *Server) overloaded(dst, req []byte, p Proto) (resp []byte) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(r, req)
			resp = servfail(dst, req)
		}
	}()
	resp = s.h.Overloaded(dst, req, p)
	if len(resp) > maxMessage {
		resp = servfail(dst, req)
	}
	return resp
}

func (s *Server) recovered(r any, req []byte) {
	s.m.panics.Inc()
	s.log.Error("handler panic; answered SERVFAIL", zap.Any("panic", r), zap.Binary("query", req), zap.Stack("stack"))
}
