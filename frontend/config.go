package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/nodedns/nodedns/frontend/srcpolicy"
	"io"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nodedns/nodedns/frontend/cache"
	"github.com/nodedns/nodedns/frontend/gate"
	"github.com/nodedns/nodedns/frontend/resolver"
	"github.com/nodedns/nodedns/frontend/server"
)

// Defaults of the flags that have no package to hold them.
const (
	defaultListen          = "169.254.20.10:53"
	defaultBackend         = "127.0.0.1:5300"
	defaultMetrics         = ":9253"
	defaultHealth          = "127.0.0.1:9254" // loopback: only the node's kubelet probes it; the chart passes the pod's probe address
	defaultMode            = "iptables"
	defaultLocalIP         = "169.254.20.10"
	defaultInterface       = "nodedns"
	defaultSyncInterval    = 10 * time.Second
	defaultBackendReadyURL = "http://127.0.0.1:8181/ready"
	defaultHandoverDir     = "/run/nodedns"
	defaultClusterDomain   = "cluster.local"
	// defaultShutdownTimeout bounds the drain on SIGTERM: well above a
	// backend round trip, well below Kubernetes' 30s grace period, so that
	// teardown still runs before SIGKILL.
	defaultShutdownTimeout = 5 * time.Second
)

// minAnswerTimeout is the shortest --answer-timeout: a name forwarded to
// servers on the internet commonly takes tens to hundreds of milliseconds,
// and a shorter bound would answer SERVFAIL to the first query of most of
// them.
const minAnswerTimeout = 100 * time.Millisecond

// defaultGCPercent is the garbage collector's target when the GOGC
// environment variable is not set. The frontend's heap is nearly all cache
// entries, which live until evicted, and a cache hit allocates nothing, so
// the collector runs only while misses fill the cache. Go's default (100)
// lets the heap grow to twice the live cache before it collects; 25 holds
// it to 1.25 times: 3 MiB less peak RSS with 10,000 entries cached, for the
// same CPU time over a pass of 10,000 misses (docs/performance.md, "Tuning
// notes"). A fixed memory limit (GOMEMLIMIT) would have to know the size of
// the answers in advance: set below the live cache, it makes the collector
// run back to back.
const defaultGCPercent = 25

// setGCPercent applies defaultGCPercent unless GOGC chose a value.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// modeNames lists the values of --mode (see docs and DESIGN.md, "Modes").
const modeNames = "iptables, link-local, node-ip"

// config is the frontend's command line, parsed and validated.
type config struct {
	listen          []string
	backend         string
	fallbacks       []string
	allowNetworks   []string
	setupNetwork    bool
	metricsAddr     string
	healthAddr      string
	mode            string
	iptablesBackend string
	localIPs        []net.IP
	serviceIPs      []net.IP
	releaseTo       releaseFlag
	iface           string
	syncInterval    time.Duration
	backendReadyURL string
	logLevel        string
	maxInflight     int
	shutdownTimeout time.Duration
	answerTimeout   time.Duration
	lameduck        time.Duration
	bindTimeout     time.Duration
	handoverDir     string
	holderDir       string
	cache           cache.Config
	clusterDomain   string
	searchPrefetch  bool
	denyBelow       bool
	shedDelay       time.Duration
	version         bool

	// The query log (--query-log, --query-log-sample), the top talkers
	// (--top-talkers) and the client's address passed to the backend
	// (--pass-client-address).
	queryLog       string
	queryLogSample float64
	topTalkers     int
	passClient     bool

	// maxInflightPerSource bounds one client's misses in flight; 0 is
	// server.Config's default (an eighth of maxInflight).
	maxInflightPerSource int
}

// newFlagSet registers every flag on a new FlagSet that fills cfg. It is
// the one definition of the frontend's settings: the README's FLAGS section
// is checked against it (readme_test.go), and the chart against that
// section (helm/frontend_flags_test.go: every flag is passed from a value
// or named there with the reason the chart leaves it at its default).
func newFlagSet(cfg *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("nodedns-frontend", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: nodedns-frontend [flags]\n       nodedns-frontend diagnose\n       nodedns-frontend top [--metrics=ADDR] [-n=N]\n       nodedns-frontend hold --holder-dir=DIR [--hold-timeout=30s]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	c := cache.DefaultConfig()
	*cfg = config{
		listen:      []string{defaultListen},
		localIPs:    []net.IP{net.ParseIP(defaultLocalIP)},
		maxInflight: server.DefaultMaxInflight,
		cache:       c,
	}
	fs.Var((*listFlag)(&cfg.listen), "listen", "`ADDR[,ADDR]` to serve DNS on, over UDP and TCP (IP:port; IPv4 and IPv6)")
	fs.StringVar(&cfg.backend, "backend", defaultBackend, "`ADDR` of the local backend (TCP)")
	fs.Var((*listFlag)(&cfg.fallbacks), "fallback", "`ADDR[,ADDR]` tried over TCP when the backend fails (other nodes' backends through a Service)")
	fs.Var((*listFlag)(&cfg.allowNetworks), "allow-networks", "`CIDR[,CIDR]` of the clients answered, and the word local: loopback, the node's own addresses and every source the node reaches without a gateway (its pods, its attached subnets); others get REFUSED (UDP) or a closed connection (TCP). Empty answers everybody")
	fs.BoolVar(&cfg.setupNetwork, "setup-network", true, "own the local IPs and install the node's interface and rules; false touches no interface or rule")
	fs.StringVar(&cfg.metricsAddr, "metrics", defaultMetrics, "`ADDR` serving Prometheus /metrics; empty disables")
	fs.StringVar(&cfg.healthAddr, "health", defaultHealth, "`ADDR` serving /health and /ready; empty disables")
	fs.StringVar(&cfg.mode, "mode", defaultMode, "how pods reach the frontend: "+modeNames)
	fs.StringVar(&cfg.iptablesBackend, "iptables-backend", "auto", "iptables implementation of the rules: auto (the one the host's rules live in), nft or legacy; nft needs no CAP_NET_RAW")
	fs.Var((*ipListFlag)(&cfg.localIPs), "local-ip", "`IP[,IP]` owned by the frontend (the node IP in node-ip mode)")
	fs.Var((*ipListFlag)(&cfg.serviceIPs), "service-ip", "kube-dns ClusterIP `IP[,IP]` owned in iptables mode (required) and node-ip mode")
	fs.Var(&cfg.releaseTo, "release-to", "kube-dns ClusterIP `IP[,IP]` that queries to the local IPs go to whenever no frontend serves them (default: --service-ip; empty: none)")
	fs.StringVar(&cfg.iface, "interface", defaultInterface, "`NAME` of the link holding the local IPs")
	durationVar(fs, &cfg.syncInterval, "sync-interval", defaultSyncInterval, "how often the interface and rules are re-applied")
	fs.StringVar(&cfg.backendReadyURL, "backend-ready-url", defaultBackendReadyURL, "`URL` of the backend's readiness endpoint")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "`LEVEL`: debug, info, warn or error")
	fs.IntVar(&cfg.maxInflight, "max-inflight", server.DefaultMaxInflight, "misses resolved at once; past it queries are answered stale or SERVFAIL; it also bounds the exchanges with the backend, refreshes included")
	fs.IntVar(&cfg.maxInflightPerSource, "max-inflight-per-source", 0, "misses of one client address resolved at once; past it its queries are answered SERVFAIL; 0 means an eighth of --max-inflight")
	durationVar(fs, &cfg.shedDelay, "shed-delay", server.DefaultShedDelay, "queue delay that sheds misses: when for 100ms every UDP batch had waited longer than this while 16 or more misses per core were started every 25ms, the limit on misses in flight drops (to 3/4 of those in flight, at least 8) and misses past it are answered stale or SERVFAIL at once, so that cache hits stay fast; 0 disables")
	durationVar(fs, &cfg.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGTERM, how long in-flight queries may take before teardown")
	durationVar(fs, &cfg.answerTimeout, "answer-timeout", resolver.DefaultAnswerTimeout, "how long a miss waits for the backend before it is answered stale, or else SERVFAIL (not cached), while the exchange goes on to fill the cache: under a stub resolver's timeout (glibc: 5s); at least 100ms and below --shutdown-timeout, so that a SIGTERM drain answers every miss")
	durationVar(fs, &cfg.lameduck, "lameduck", 0, "on SIGTERM with no other instance on the node, how long the frontend keeps the node's DNS, answering, before it hands it back to kube-proxy's path: time for kube-proxy to learn that this pod's endpoints are terminating, so that no new flow is sent to them; 0 hands it back at once")
	durationVar(fs, &cfg.bindTimeout, "bind-timeout", 0, "how long a --listen address another process holds is tried again, every 100ms, before the frontend exits; 0 fails at once (node-ip mode: the DNS server being replaced may still hold the node IP's port 53)")
	fs.StringVar(&cfg.handoverDir, "handover-dir", defaultHandoverDir, "`DIR` of the unix socket through which a newer instance takes the sockets over; empty disables")
	fs.StringVar(&cfg.holderDir, "holder-dir", "", "`DIR` of the socket holder's unix socket (nodedns-frontend hold), which keeps this instance's sockets open across a crash; empty disables")
	fs.IntVar(&cfg.cache.Size, "cache-size", c.Size, "positive answers cached")
	fs.IntVar(&cfg.cache.NegativeSize, "negative-cache-size", c.NegativeSize, "negative answers (NXDOMAIN, NODATA) and SERVFAILs cached; 0 disables")
	durationVar(fs, &cfg.cache.MinTTL, "min-ttl", c.MinTTL, "raise shorter TTLs to this")
	durationVar(fs, &cfg.cache.MaxTTL, "max-ttl", c.MaxTTL, "lower longer TTLs of positive answers to this")
	durationVar(fs, &cfg.cache.NegativeMaxTTL, "negative-max-ttl", c.NegativeMaxTTL, "lower longer TTLs of negative answers to this")
	durationVar(fs, &cfg.cache.ServfailTTL, "servfail-ttl", c.ServfailTTL, "how long a backend SERVFAIL is cached (at most 5m); 0 disables")
	durationVar(fs, &cfg.cache.ServeStale, "serve-stale", c.ServeStale, "how long past expiry an answer may be served when the backend fails (RFC 8767); 0 disables")
	fs.IntVar(&cfg.cache.PrefetchHits, "prefetch", c.PrefetchHits, "hits that make an entry near expiry refreshed in the background; 0 disables")
	durationVar(fs, &cfg.cache.ClusterNegativeMaxTTL, "cluster-negative-max-ttl", c.ClusterNegativeMaxTTL, "lower longer TTLs of negative answers for names of --cluster-domain to this, so that a Service, namespace or endpoint created under a name denied is found within it; 0 caches none")
	fs.StringVar(&cfg.clusterDomain, "cluster-domain", defaultClusterDomain, "kubelet's --cluster-domain `DOMAIN`: the zone the backend answers from the API server, which --search-prefetch, --deny-below-nxdomain and --cluster-negative-max-ttl apply to; empty turns them off")
	fs.BoolVar(&cfg.searchPrefetch, "search-prefetch", true, "a miss of NAME.NAMESPACE.svc.DOMAIN (NAME of two labels or more) also fetches NAME.svc.DOMAIN and NAME.DOMAIN, a pod's next two tries; NAME itself only when it was asked before")
	fs.BoolVar(&cfg.denyBelow, "deny-below-nxdomain", true, "answer NXDOMAIN from the cache for a name under a Service, namespace or name of DOMAIN cached NXDOMAIN (RFC 8020), without asking the backend; false where the Corefile serves names of DOMAIN by other plugins or servers")
	fs.StringVar(&cfg.queryLog, "query-log", "", "`ZONE[,ZONE]` whose queries are logged, one JSON line each (client address, name, type, rcode, answered from the cache or not, latency), sampled by --query-log-sample; . logs every name; empty disables")
	fs.Float64Var(&cfg.queryLogSample, "query-log-sample", 0.01, "fraction of the queries of --query-log logged, from above 0 to 1")
	fs.IntVar(&cfg.topTalkers, "top-talkers", server.DefaultTopTalkers, "client addresses whose queries, NXDOMAIN, SERVFAIL and REFUSED answers and refusals for capacity are counted over the last minute, served as JSON on --metrics' /top (nodedns-frontend top); past that many, new addresses are counted together as other; 0 disables")
	fs.BoolVar(&cfg.passClient, "pass-client-address", false, "tell the backend, in an EDNS0 option (code 65053) of each miss, the address of the pod that asked, so that CoreDNS's log and acl plugins see pods; needs the nodedns_client plugin in the backend's server block, which removes the option (a plain CoreDNS would forward it); fallbacks never get it")
	fs.BoolVar(&cfg.version, "version", false, "print the version and exit")
	return fs
}

// parseConfig parses args (without the program name) and validates the
// result. Errors are for the user: they name the flag. With -h the usage
// goes to out and the error is flag.ErrHelp.
func parseConfig(args []string, out io.Writer) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg, io.Discard) // errors are reported once, by the caller
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
	if cfg.version {
		return cfg, nil
	}
	return cfg, cfg.validate()
}

// validate reports every problem a flag can have without touching the
// network; the packages' own Validate methods check their part.
func (c config) validate() error {
	var errs []error
	if err := (server.Config{Listen: c.listen, MaxInflight: c.maxInflight}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--listen: %w", err))
	}
	if c.backend == "" {
		errs = append(errs, errors.New("--backend: empty"))
	}
	if _, err := srcpolicy.Parse(c.allowNetworks, srcpolicy.KernelRouter); err != nil {
		errs = append(errs, fmt.Errorf("--allow-networks: %w", err))
	}
	for _, a := range append([]string{c.backend}, c.fallbacks...) {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			errs = append(errs, fmt.Errorf("--backend/--fallback %q: %w", a, err))
		}
	}
	for _, a := range []struct{ flag, addr string }{{"--metrics", c.metricsAddr}, {"--health", c.healthAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); a.addr != "" && err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		}
	}
	if c.backendReadyURL != "" {
		if _, err := gate.ParseReadyURL(c.backendReadyURL); err != nil {
			errs = append(errs, fmt.Errorf("--backend-ready-url: %w", err))
		}
	}
	if c.metricsAddr != "" && c.metricsAddr == c.healthAddr && !strings.HasSuffix(c.metricsAddr, ":0") {
		errs = append(errs, fmt.Errorf("--metrics and --health: both %q", c.metricsAddr))
	}
	switch c.iptablesBackend {
	case "auto", "nft", "legacy":
	default:
		errs = append(errs, fmt.Errorf("--iptables-backend %q: want auto, nft or legacy", c.iptablesBackend))
	}
	switch c.mode {
	case "iptables", "link-local", "node-ip":
	default:
		errs = append(errs, fmt.Errorf("--mode %q: want one of %s", c.mode, modeNames))
	}
	if c.setupNetwork && c.mode == "iptables" && len(c.serviceIPs) == 0 {
		errs = append(errs, errors.New("--mode=iptables needs --service-ip (the kube-dns ClusterIP); use --mode=link-local to own only --local-ip"))
	}
	if len(c.localIPs) == 0 {
		errs = append(errs, errors.New("--local-ip: empty"))
	}
	if c.syncInterval <= 0 {
		errs = append(errs, fmt.Errorf("--sync-interval %v: must be positive", c.syncInterval))
	}
	if c.maxInflight < 1 {
		errs = append(errs, fmt.Errorf("--max-inflight %d: must be at least 1", c.maxInflight))
	}
	if c.maxInflightPerSource < 0 || c.maxInflightPerSource > max(c.maxInflight, 1) {
		errs = append(errs, fmt.Errorf("--max-inflight-per-source %d: want 0 (an eighth of --max-inflight) up to --max-inflight (%d)", c.maxInflightPerSource, c.maxInflight))
	}
	if c.bindTimeout < 0 {
		errs = append(errs, fmt.Errorf("--bind-timeout %v: must not be negative", c.bindTimeout))
	}
	if c.shutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v: must be positive", c.shutdownTimeout))
	}
	if c.answerTimeout < minAnswerTimeout || (c.shutdownTimeout > 0 && c.answerTimeout >= c.shutdownTimeout) {
		errs = append(errs, fmt.Errorf("--answer-timeout %v: want %v or more and below --shutdown-timeout (%v), which must leave the misses in flight time to be answered", c.answerTimeout, minAnswerTimeout, c.shutdownTimeout))
	}
	if c.lameduck < 0 {
		errs = append(errs, fmt.Errorf("--lameduck %v: must not be negative (0 disables)", c.lameduck))
	}
	if c.shedDelay < 0 {
		errs = append(errs, fmt.Errorf("--shed-delay %v: must not be negative (0 disables)", c.shedDelay))
	}
	if _, err := server.ParseQueryLog(c.queryLog, c.queryLogSample); err != nil {
		errs = append(errs, fmt.Errorf("--query-log/--query-log-sample: %w", err))
	}
	if c.topTalkers < 0 {
		errs = append(errs, fmt.Errorf("--top-talkers %d: must not be negative (0 disables)", c.topTalkers))
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel))
	}
	// The cache flags, and --cluster-domain with --search-prefetch.
	if err := c.resolverConfig("53").Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// listFlag is a comma separated list of strings; setting it replaces the
// default.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// ipListFlag is a comma separated list of IP addresses.
// releaseFlag is --release-to: a list of IPs, and whether it was given
// (its default is --service-ip).
type releaseFlag struct {
	ips ipListFlag
	set bool
}

func (r *releaseFlag) String() string { return r.ips.String() }

func (r *releaseFlag) Set(s string) error {
	r.set = true
	return r.ips.Set(s)
}

// releaseTo is --release-to, or --service-ip when it was not given.
func (c *config) releaseToIPs() []net.IP {
	if c.releaseTo.set {
		return c.releaseTo.ips
	}
	return c.serviceIPs
}

type ipListFlag []net.IP

func (l *ipListFlag) String() string {
	s := make([]string, len(*l))
	for i, ip := range *l {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

func (l *ipListFlag) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ip := net.ParseIP(f)
		if ip == nil {
			return fmt.Errorf("%q is not an IP address", f)
		}
		*l = append(*l, ip)
	}
	return nil
}

// durationFlag is a time.Duration flag whose parse errors say what is wrong
// ("missing unit in duration"), where the flag package only says "parse error".
type durationFlag time.Duration

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durationFlag)(p), name, usage+" (a `duration` such as 90s or 1h)")
}

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "time: "))
	}
	*d = durationFlag(v)
	return nil
}

// resolverConfig returns the resolver's part of the flags; port names the
// server in CoreDNS's series.
func (c config) resolverConfig(port string) resolver.Config {
	return resolver.Config{
		Cache: c.cache, Server: "dns://:" + port, ClusterDomain: c.clusterDomain,
		SearchPrefetch: c.searchPrefetch, DenyBelowNXDOMAIN: c.denyBelow,
		AnswerTimeout: c.answerTimeout, PassClient: c.passClient,
	}
}
