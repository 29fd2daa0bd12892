package resolver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodedns/nodedns/frontend/cache"
	"github.com/nodedns/nodedns/frontend/dnswire"
	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/frontend/upstream"
	"github.com/nodedns/nodedns/shared/clientopt"
)

// prefetchTimeout bounds a background refresh: longer than one upstream
// attempt (7.5s, upstream.DefaultTimeout: the backend's own forward
// timeouts and a margin), so that a refresh of a name that is slow
// upstream is not given up before the backend itself gives up on it.
const prefetchTimeout = 8 * time.Second

// Exchanger sends a query to the backend. The upstream package implements
// it; the returned message may be shared with other callers (the pool
// coalesces identical queries too) and must not be modified.
type Exchanger interface {
	Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error)
}

// errMismatch marks a backend answer that is not for the question asked.
var errMismatch = errors.New("answer does not match the question")

// Coalescer is implemented by an Exchanger that counts the queries that
// shared an exchange (upstream.Pool: nodedns_upstream_coalesced_total). The
// resolver shares one exchange among the misses of a cache key before they
// reach the Exchanger, and reports each one that joined another's.
type Coalescer interface {
	CountCoalesced()
}

// Resolver implements server.Handler.
type Resolver struct {
	cfg    Config
	cache  *cache.Cache // always non-nil
	ex     Exchanger    // always non-nil
	shared func()       // called for each miss that joins a running flight; always non-nil
	search *searchPath  // the cluster domain's names; nil without Config.ClusterDomain
	log    *zap.Logger
	m      *metrics

	// searchPrefetchOn follows the search path (Config.SearchPrefetch);
	// below denies names under a cached NXDOMAIN (Config.DenyBelowNXDOMAIN).
	// Both are false with a nil search.
	searchPrefetchOn, below bool

	ctx     context.Context // cancelled by Close; bounds flights and prefetches
	cancel  context.CancelFunc
	mu      sync.Mutex         // guards closed, flights and wg.Add
	closed  bool               // guarded by mu
	flights map[string]*flight // exchanges running, by cache key; guarded by mu
	wg      sync.WaitGroup     // running flights and prefetches
}

var (
	_ server.Handler       = (*Resolver)(nil)
	_ server.ClientHandler = (*Resolver)(nil)
)

// New returns a Resolver that sends misses to ex and creates its series in
// set. now is the clock for TTLs; nil means the real time through a coarse
// clock (cache.New). Close releases it.
func New(cfg Config, ex Exchanger, set *vm.Set, log *zap.Logger, now func() time.Time) (*Resolver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("resolver config: %w", err)
	}
	if ex == nil {
		return nil, errors.New("resolver: nil Exchanger")
	}
	cfg.Cache.ClusterDomain = cfg.ClusterDomain
	c, err := cache.New(cfg.Cache, now)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	search, err := newSearchPath(cfg.ClusterDomain)
	if err != nil {
		return nil, fmt.Errorf("resolver config: %w", err)
	}
	shared := func() {}
	if co, ok := ex.(Coalescer); ok {
		shared = co.CountCoalesced
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Resolver{
		cfg: cfg, cache: c, ex: ex, shared: shared, log: log.Named("resolver"),
		search: search, searchPrefetchOn: search != nil && cfg.SearchPrefetch, below: search != nil && cfg.DenyBelowNXDOMAIN,
		m:   newMetrics(set, cfg.Server, c),
		ctx: ctx, cancel: cancel, flights: make(map[string]*flight),
	}, nil
}

// Cache returns the resolver's cache, for stats and tests.
func (r *Resolver) Cache() *cache.Cache { return r.cache }

// Close stops prefetching, waits for running prefetches and exchanges and
// stops the cache's clock.
func (r *Resolver) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.cache.Close()
}

// ServeFast implements server.Handler: parse, count, answer a cache hit, a
// malformed query or a zone transfer (REFUSED); anything else is a miss. A
// hit does not allocate.
func (r *Resolver) ServeFast(dst, req []byte, proto server.Proto) ([]byte, bool) {
	start, weight := sampleStart()
	var q dnswire.Query
	if err := dnswire.ParseQuery(req, &q); err != nil {
		return r.malformed(dst, req, &q, err, start, weight), true
	}
	r.m.request(proto, q.QType)
	if q.ZoneTransfer() {
		// RFC 5936 §4.2 lets a server refuse zone transfers: pods get
		// REFUSED, and no transfer is ever streamed over the backend's
		// pooled connections.
		r.m.response(pluginLocal, dnswire.RcodeRefused, start, weight)
		return dnswire.AppendError(dst[:0], req, &q, dnswire.RcodeRefused), true
	}
	limit := q.Limit(proto.IsTCP())
	resp, res := r.cache.Get(dst[:0], &q, limit)
	if !res.Hit {
		if r.below {
			if resp, ok := r.deniedBelow(dst, &q, limit); ok {
				r.m.response(pluginCache, dns.RcodeNameError, start, weight)
				return resp, true
			}
		}
		return nil, false
	}
	if res.Stale {
		r.m.servedStale.Inc()
	}
	if res.Prefetch {
		r.prefetch(q.Key())
	}
	r.m.response(pluginCache, res.Rcode, start, weight)
	return resp, true
}

// ServeSlow implements server.Handler: a miss goes to the backend, and the
// answer is stored and written like a hit. The misses of one cache key at
// the same time share one exchange and the one entry built from its answer
// (flight). When the backend fails or answers SERVFAIL, or has not
// answered within the client response timer, an expired entry is served
// stale (RFC 8767 §5). A miss is answered within Config.AnswerTimeout
// whatever the backend does: stale, or else SERVFAIL, which is not cached
// (errAnswerTimeout).
func (r *Resolver) ServeSlow(ctx context.Context, dst, req []byte, proto server.Proto) []byte {
	return r.ServeSlowFrom(ctx, dst, req, proto, netip.Addr{})
}

// ServeSlowFrom implements server.ClientHandler: ServeSlow for a query of
// client. With Config.PassClient, the backend query that a new exchange
// makes carries client's address (shared/clientopt), so that the
// backend's plugins see the pod; a miss that joins an exchange running
// for another client shares that one's answer, as it would share the
// cached answer a moment later.
func (r *Resolver) ServeSlowFrom(ctx context.Context, dst, req []byte, proto server.Proto, client netip.Addr) []byte {
	start := time.Now()
	var q dnswire.Query
	if err := dnswire.ParseQuery(req, &q); err != nil {
		return r.malformed(dst, req, &q, err, start, 1) // only when called without ServeFast
	}
	limit := q.Limit(proto.IsTCP())
	key := q.Key()
	var resp *dns.Msg
	var err error
	_, stale, ok := r.cache.GetStale(dst[:0], &q, limit)
	// The exchange runs detached, so that a miss left at its timer
	// still fills the cache for the next ones when the backend answers.
	if !r.cfg.PassClient {
		client = netip.Addr{}
	}
	f := r.join(ctx, key, true, client)
	if ok && stale {
		// An expired answer is there to serve: wait for the backend only
		// as long as the client response timer (RFC 8767 §5), or the
		// answer timeout if shorter.
		resp, err = r.await(ctx, f, min(clientResponseTimer, r.cfg.AnswerTimeout), errClientTimer, true)
	} else {
		// Nothing to serve instead: SERVFAIL at the answer timeout
		// rather than silence past the client's own timeout.
		resp, err = r.await(ctx, f, r.cfg.AnswerTimeout, errAnswerTimeout, false)
	}
	if err == nil && resp.Rcode == dns.RcodeServerFailure {
		err = errServfail
	}
	if err != nil {
		if out, stale, ok := r.cache.GetStale(dst[:0], &q, limit); ok {
			if stale {
				r.m.servedStale.Inc()
				if backendFailed(ctx, err) {
					r.cache.RefreshFailed(key)
				}
			}
			r.m.response(pluginCache, int(out[3]&0xf), start, 1)
			return out
		}
		if resp == nil {
			return r.servfail(dst, req, &q, start)
		}
	}
	// The entry every miss of this key shares: built once (flight.entry).
	e, err := f.entry(r.cache)
	if err != nil {
		r.log.Debug("backend answer not usable", zap.Error(err))
		return r.servfail(dst, req, &q, start)
	}
	out := r.cache.Write(dst[:0], e, &q, limit)
	r.m.response(pluginForward, int(out[3]&0xf), start, 1)
	return out
}

// errServfail marks a SERVFAIL from the backend, which a stale answer may
// replace.
var errServfail = errors.New("backend answered SERVFAIL")

// Overloaded implements server.Handler: a query refused for lack of
// capacity gets a stale answer when there is one (RFC 8767 §5), else
// SERVFAIL. Over TCP the answer is whole: only a UDP answer is truncated
// to the client's UDP size (RFC 1035 §4.2.1, RFC 7766 §8).
func (r *Resolver) Overloaded(dst, req []byte, proto server.Proto) []byte {
	start := time.Now()
	var q dnswire.Query
	if err := dnswire.ParseQuery(req, &q); err != nil {
		return r.malformed(dst, req, &q, err, start, 1)
	}
	// The server counts these (nodedns_server_overloaded_total).
	if out, stale, ok := r.cache.GetStale(dst[:0], &q, q.Limit(proto.IsTCP())); ok {
		if stale {
			r.m.servedStale.Inc()
		}
		r.m.response(pluginCache, int(out[3]&0xf), start, 1)
		return out
	}
	return r.servfail(dst, req, &q, start)
}

func (r *Resolver) servfail(dst, req []byte, q *dnswire.Query, start time.Time) []byte {
	r.m.response(pluginLocal, dns.RcodeServerFailure, start, 1)
	return dnswire.AppendError(dst[:0], req, q, dnswire.RcodeServFail)
}

// malformed counts a rejected query and answers it, or drops it (nil).
func (r *Resolver) malformed(dst, req []byte, q *dnswire.Query, err error, start time.Time, weight int) []byte {
	pe, ok := err.(*dnswire.ParseError) // ParseQuery returns them unwrapped
	if !ok {
		pe = dnswire.ErrTruncated
	}
	r.m.malformed[pe].Inc()
	if pe.Rcode < 0 {
		return nil
	}
	r.m.response(pluginLocal, pe.Rcode, start, weight)
	return dnswire.AppendError(dst[:0], req, q, pe.Rcode)
}

// fetch asks the backend the question in key (from dnswire.Query.Key) with
// RD set and the client's DO and CD bits, and checks that the answer is for
// that question (errMismatch). Its callers count the failures (await).
//
// A valid client is passed to the backend in the option of
// shared/clientopt; the pool sends it only to the backend, never to a
// fallback.
func (r *Resolver) fetch(ctx context.Context, key []byte, client netip.Addr) (*dns.Msg, error) {
	name, _, err := dns.UnpackDomainName(dnswire.KeyName(key), 0)
	if err != nil {
		return nil, fmt.Errorf("question name: %w", err)
	}
	qtype, qclass, flags := dnswire.KeyQuestion(key)
	m := new(dns.Msg) // ID 0: the pool gives each attempt an ID of its own
	m.RecursionDesired = true
	m.CheckingDisabled = flags&dnswire.KeyCD != 0
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: qclass}}
	m.SetEdns0(dnswire.OurUDPSize, flags&dnswire.KeyDO != 0)
	if client.IsValid() {
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, clientopt.Option(client))
	}

	resp, err := r.ex.Exchange(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("exchange %s %s: %w", name, dns.TypeToString[qtype], err)
	}
	if err := upstream.MatchQuestion(resp, m.Question[0]); err != nil {
		return nil, fmt.Errorf("exchange %s %s: %w: %w", name, dns.TypeToString[qtype], errMismatch, err)
	}
	return resp, nil
}
