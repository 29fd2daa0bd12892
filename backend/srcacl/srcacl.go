// Package srcacl is the nodedns_acl directive: the source policy of the
// backend's fallback listener, the same as the frontend's
// (frontend/srcpolicy) plus the cluster's own networks. The listener
// recurses, and on a node with a public address an open one is an
// amplifier; like unbound and BIND it answers only its networks, and
// refuses the rest.
//
//	nodedns_acl [local] [nodes] [PREFIX...] {
//	    kubeconfig PATH   # for nodes; default: the in-cluster ServiceAccount
//	    snapshot DIR      # for nodes: keep the last list's networks in DIR; none: nowhere
//	}
//
// local is the frontend's word: loopback, the node's own addresses and
// what the node reaches without a gateway (its pods, its attached
// subnets), asked of the kernel's routing table. nodes is what the Node
// objects list, from a watch: every node's spec.podCIDRs (the pod
// networks of the cluster, IPv4 and IPv6 alike) and its InternalIP and
// ExternalIP addresses (other nodes' frontends and holders ask from
// there). A PREFIX is answered as given. Loopback is always answered.
// Everything else gets REFUSED and is counted in
// nodedns_backend_denied_total. With snapshot, the networks of the last
// list of Nodes are written to DIR when they change and served at start
// until the first list: a backend restarted with no API server answers
// the pods of other nodes as before (snapshot.go).
package srcacl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodedns/nodedns/frontend/srcpolicy"
)

// Name is the directive.
const Name = "nodedns_acl"

// NodesWord is the word for the networks the Node objects list.
const NodesWord = "nodes"

var log = clog.NewWithPlugin(Name)

var (
	deniedCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nodedns",
		Subsystem: "backend",
		Name:      "denied_total",
		Help:      "Queries refused by nodedns_acl: their source is in none of the allowed networks.",
	}, []string{"server"})
	nodeNetworks = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "nodedns",
		Subsystem: "backend",
		Name:      "node_networks",
		Help:      "What nodedns_acl's nodes word answers: Node objects read, their distinct pod CIDRs and addresses.",
	}, []string{"kind"})
)

func init() { plugin.Register(Name, setup) }

// ACL is the handler.
type ACL struct {
	Next   plugin.Handler
	static *srcpolicy.Policy // local and prefixes; nil: none of them
	nodes  *Nodes            // nil without the nodes word
}

// Allowed reports whether a query from a may be answered.
func (a *ACL) Allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	if addr.IsLoopback() {
		return true
	}
	if a.static != nil && a.static.Allowed(addr.As16()) {
		return true
	}
	return a.nodes != nil && a.nodes.Contains(addr)
}

// ServeDNS answers REFUSED to a source outside the policy, with the
// query's question only: nobody is sent more than they sent.
func (a *ACL) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if addr, ok := remoteAddr(w.RemoteAddr()); ok && a.Allowed(addr) {
		return plugin.NextOrFailure(a.Name(), a.Next, ctx, w, r)
	}
	deniedCount.WithLabelValues(metricsServer(ctx)).Inc()
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeRefused)
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// Name implements plugin.Handler.
func (a *ACL) Name() string { return Name }

func remoteAddr(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	}
	if a == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap(), err == nil
}

func metricsServer(ctx context.Context) string { return metrics.WithServer(ctx) }

// config is a parsed stanza.
type config struct {
	words       []string // local and prefixes, for srcpolicy
	nodes       bool
	kubeconfig  string
	snapshotDir string // for nodes; "" (or "none" given): none
}

func parse(c *caddy.Controller) (config, error) {
	var cfg config
	for c.Next() {
		for _, w := range c.RemainingArgs() {
			for _, w := range strings.Split(w, ",") {
				w = strings.TrimSpace(w)
				switch w {
				case "":
				case NodesWord:
					cfg.nodes = true
				default:
					cfg.words = append(cfg.words, w)
				}
			}
		}
		for c.NextBlock() {
			switch c.Val() {
			case "kubeconfig":
				args := c.RemainingArgs()
				if len(args) != 1 {
					return cfg, c.ArgErr()
				}
				cfg.kubeconfig = args[0]
			case "snapshot":
				args := c.RemainingArgs()
				if len(args) != 1 {
					return cfg, c.ArgErr()
				}
				if args[0] != "none" {
					cfg.snapshotDir = args[0]
				}
			default:
				return cfg, c.Errf("unknown property %q", c.Val())
			}
		}
	}
	if len(cfg.words) == 0 && !cfg.nodes {
		return cfg, fmt.Errorf("no network given: name %q, %q or prefixes (an open resolver is not a default)", srcpolicy.Local, NodesWord)
	}
	return cfg, nil
}

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(Name, err)
	}
	a := &ACL{}
	if len(cfg.words) > 0 {
		if a.static, err = srcpolicy.Parse(cfg.words, srcpolicy.KernelRouter); err != nil {
			return plugin.Error(Name, err)
		}
	}
	if cfg.nodes {
		client, err := newClient(cfg.kubeconfig)
		switch {
		case errors.Is(err, rest.ErrNotInCluster):
			// A plain run outside a cluster (tests, a developer's
			// machine): nothing to watch. Said once; the rest of the
			// policy holds.
			log.Warningf("%s: no API server (not in a cluster, no kubeconfig): no node's networks are answered", NodesWord)
		case err != nil:
			return plugin.Error(Name, fmt.Errorf("%s: %w", NodesWord, err))
		default:
			a.nodes = NewNodes(client)
			a.nodes.onChange = logChange()
			if cfg.snapshotDir != "" {
				if err := os.MkdirAll(cfg.snapshotDir, 0o755); err != nil {
					return plugin.Error(Name, fmt.Errorf("snapshot: %w", err))
				}
				a.nodes.snapshotDir = cfg.snapshotDir
			}
		}
	}
	var (
		cancel context.CancelFunc
		once   sync.Once
	)
	c.OnStartup(func() error {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		go a.static.Run(ctx)
		if a.nodes != nil {
			go a.nodes.Run(ctx, time.Second)
		}
		return nil
	})
	c.OnShutdown(func() error {
		once.Do(func() {
			if cancel != nil {
				cancel()
			}
		})
		return nil
	})
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		a.Next = next
		return a
	})
	return nil
}

// logChange logs the first set and a later one that lost or gained pod
// networks, and says when no Node names a pod CIDR: pods of other nodes
// are then refused unless listed.
func logChange() func(nodes, podCIDRs, addrs int) {
	last := -1
	return func(nodes, podCIDRs, addrs int) {
		nodeNetworks.WithLabelValues("nodes").Set(float64(nodes))
		nodeNetworks.WithLabelValues("pod_cidrs").Set(float64(podCIDRs))
		nodeNetworks.WithLabelValues("addresses").Set(float64(addrs))
		if podCIDRs == last {
			return
		}
		if podCIDRs == 0 && nodes > 0 {
			log.Warningf("no Node of %d names spec.podCIDRs (the CNI allocates pod addresses itself): only node addresses are answered for %s; list the pod networks beside it (fallback.allowedNetworks), or pods of other nodes asking through the kube-dns Service get REFUSED", nodes, NodesWord)
		} else {
			log.Infof("%s: %d nodes, %d pod CIDRs, %d node addresses", NodesWord, nodes, podCIDRs, addrs)
		}
		last = podCIDRs
	}
}

func newClient(kubeconfig string) (clientset.Interface, error) {
	var (
		rc  *rest.Config
		err error
	)
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.UserAgent = "nodedns-backend/" + Name
	return clientset.NewForConfig(rc)
}
