package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

// Design is one way of running a node's DNS.
type Design struct {
	// Name is the short name used in flags and tables.
	Name string
	// Title says what runs.
	Title string
	start func(ctx context.Context, e *Env, n *simNode) (*running, error)
}

// Designs are the compared designs, in table order.
var Designs = []Design{
	{"coredns", "CoreDNS Deployment: pods → kube-dns ClusterIP (kube-proxy DNAT, conntrack) → CoreDNS on another node", startCoreDNS},
	{"nodelocal", "NodeLocal DNSCache: CoreDNS with node-cache's Corefile on 169.254.20.10 + ClusterIP, NOTRACK → central CoreDNS over TCP", startNodeLocal},
	{"zalando", "dnsmasq on the node IP in front of CoreDNS (kubernetes plugin) on the same node", startZalando},
	{"coredns-ds-local", "CoreDNS DaemonSet (kubeadm's Corefile) in the pod network, kube-dns with internalTrafficPolicy: Local", startCoreDNSDSLocal},
	{"coredns-ds-prefer", "CoreDNS DaemonSet (kubeadm's Corefile) in the pod network, kube-dns with trafficDistribution: PreferSameNode", startCoreDNSDSPrefer},
	{"nodedns", "nodedns: the chart's pod (frontend on 169.254.20.10 + ClusterIP, NOTRACK; backend on localhost TCP)", startNodedns},
}

// DesignByName finds a design.
func DesignByName(name string) (Design, bool) {
	for _, d := range Designs {
		if d.Name == name {
			return d, true
		}
	}
	return Design{}, false
}

// metricsTarget is a Prometheus endpoint inside a namespace.
type metricsTarget struct {
	Netns, URL string
}

// running is a started design on a node.
type running struct {
	// Nameserver is what the pods' resolv.conf names, IP:port.
	Nameserver string
	// Procs are the node's DNS processes (CPU and memory are theirs).
	Procs []*process
	// APITier is the CoreDNS that watches the API server and answers
	// cluster names.
	APITier metricsTarget
	// Central reports that the API tier is the central CoreDNS.
	Central bool
	// Remote are DNS processes on the other node that the design adds
	// (nodedns: that node's backend, a fallback endpoint); their CPU
	// counts as central, not as the node's.
	Remote []*process
	// Frontend and Backend are nodedns's processes (chaos needs them).
	Frontend, Backend *process
	// backendReady is the URL of the backend's readiness probe, as
	// kubelet would probe it from the node.
	backendReady string
	// ds is the pod of the CoreDNS DaemonSet designs, nil for the others.
	ds *dsPodRun
	// restartFrontend starts another frontend with the same command.
	restartFrontend func() (*process, error)
	stop            []func() error
}

func (r *running) Stop() error {
	var errs []error
	for i := len(r.stop) - 1; i >= 0; i-- {
		errs = append(errs, r.stop[i]())
	}
	r.stop = nil
	return errors.Join(errs...)
}

func (r *running) alive() error {
	for _, p := range r.Procs {
		if p.Exited() {
			return p.errExited()
		}
	}
	return nil
}

func startCoreDNS(ctx context.Context, e *Env, n *simNode) (*running, error) {
	return &running{
		Nameserver: testbed.DNSServiceIP + ":53",
		APITier:    metricsTarget{e.central.Netns, "http://" + CentralIP + ":9153/metrics"},
		Central:    true,
	}, nil
}

// nodeLocalCorefile is node-cache's Corefile for this harness: bound to
// 169.254.20.10 and the kube-dns ClusterIP on port 53, the cluster zones
// to the kube-dns-upstream Service, the rest to the node's resolvers.
func nodeLocalCorefile() string {
	return NodeLocalCorefile(NodeLocal{
		Bind:       []string{LocalIP, testbed.DNSServiceIP},
		Port:       53,
		ClusterDNS: UpstreamServiceIP,
		Upstream:   UpstreamIP,
		Health:     LocalIP + ":8080",
		Metrics:    ":9253",
	})
}

// NodeLocal holds the values node-cache fills into its Corefile template.
type NodeLocal struct {
	Bind       []string // the addresses it owns (169.254.20.10 and the kube-dns ClusterIP)
	Port       int      // 53
	ClusterDNS string   // __PILLAR__CLUSTER__DNS__: the kube-dns-upstream Service, IP[:port]
	Upstream   string   // __PILLAR__UPSTREAM__SERVERS__: the node's resolvers
	Health     string   // the health plugin's address (cluster.local block)
	Metrics    string   // the prometheus plugin's address
}

// NodeLocalCorefile is node-cache's Corefile (kubernetes/dns
// cmd/node-cache, iptables mode with the kube-dns IP bound locally) with
// its placeholders filled in from n.
func NodeLocalCorefile(n NodeLocal) string {
	bind := "bind " + strings.Join(n.Bind, " ")
	port := fmt.Sprint(n.Port)
	cluster := func(zone, extra string) string {
		return zone + `:` + port + ` {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    reload
    loop
    ` + bind + `
    forward . ` + n.ClusterDNS + ` {
        force_tcp
    }
    prometheus ` + n.Metrics + `
` + extra + `}
`
	}
	return cluster("cluster.local", "    health "+n.Health+"\n") +
		cluster("in-addr.arpa", "") +
		cluster("ip6.arpa", "") + `.:` + port + ` {
    errors
    cache 30
    reload
    loop
    ` + bind + `
    forward . ` + n.Upstream + `
    prometheus ` + n.Metrics + `
}
`
}

// nodeLocalRules are node-cache's iptables rules for one local IP.
func nodeLocalRules(ip string) [][]string {
	var rules [][]string
	for _, proto := range []string{"udp", "tcp"} {
		rules = append(rules,
			[]string{"-t", "raw", "PREROUTING", "-p", proto, "-d", ip, "--dport", "53", "-j", "NOTRACK"},
			[]string{"-t", "filter", "INPUT", "-p", proto, "-d", ip, "--dport", "53", "-j", "ACCEPT"},
			[]string{"-t", "raw", "OUTPUT", "-p", proto, "-s", ip, "--sport", "53", "-j", "NOTRACK"},
			[]string{"-t", "filter", "OUTPUT", "-p", proto, "-s", ip, "--sport", "53", "-j", "ACCEPT"},
			[]string{"-t", "raw", "OUTPUT", "-p", proto, "-d", ip, "--dport", "53", "-j", "NOTRACK"},
		)
	}
	return rules
}

func startNodeLocal(ctx context.Context, e *Env, n *simNode) (_ *running, err error) {
	r := &running{
		Nameserver: testbed.DNSServiceIP + ":53",
		APITier:    metricsTarget{e.central.Netns, "http://" + CentralIP + ":9153/metrics"},
		Central:    true,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Stop())
		}
	}()
	// node-cache holds both IPs on a dummy link; this kernel has no dummy
	// type, so a bridge without ports holds them (as the frontend does).
	for _, args := range [][]string{
		{"link", "add", "nodelocaldns", "type", "bridge"},
		{"addr", "add", LocalIP + "/32", "dev", "nodelocaldns"},
		{"addr", "add", testbed.DNSServiceIP + "/32", "dev", "nodelocaldns"},
		{"link", "set", "nodelocaldns", "up"},
	} {
		if _, err := run(ctx, "ip", append([]string{"-n", n.Netns}, args...)...); err != nil {
			return nil, err
		}
	}
	r.stop = append(r.stop, func() error {
		_, err := run(context.Background(), "ip", "-n", n.Netns, "link", "del", "nodelocaldns")
		return err
	})
	for _, ip := range []string{LocalIP, testbed.DNSServiceIP} {
		for _, rule := range nodeLocalRules(ip) {
			args := append([]string{"-w", rule[0], rule[1], "-I", rule[2]}, rule[3:]...)
			if _, err := n.exec(ctx, "iptables", args...); err != nil {
				return nil, err
			}
			del := append([]string{"-w", rule[0], rule[1], "-D", rule[2]}, rule[3:]...)
			r.stop = append(r.stop, func() error { _, err := n.exec(context.Background(), "iptables", del...); return err })
		}
	}
	conf := filepath.Join(e.opts.OutDir, "nodelocal.Corefile")
	if err := os.WriteFile(conf, []byte(nodeLocalCorefile()), 0o644); err != nil {
		return nil, err
	}
	p, err := startProcess(e.opts.OutDir, n.Name+"-node-cache", n.Netns, nil, e.bin("nodedns-backend"), "-conf", conf)
	if err != nil {
		return nil, err
	}
	r.Procs = append(r.Procs, p)
	r.stop = append(r.stop, p.Stop)
	return r, waitHTTP(ctx, p, n.Netns, "http://"+LocalIP+":8080/health", time.Minute)
}

// zalandoCorefile is kubeadm's Corefile on localhost, behind dnsmasq.
func zalandoCorefile(kubeconfig string) string {
	return strings.NewReplacer(".:53 {", ".:5300 {", "bind "+CentralIP, "bind 127.0.0.1", CentralIP+":", "127.0.0.1:").Replace(centralCorefile(kubeconfig))
}

func startZalando(ctx context.Context, e *Env, n *simNode) (_ *running, err error) {
	nodeIP := n.IP.String()
	r := &running{
		Nameserver: nodeIP + ":53",
		APITier:    metricsTarget{n.Netns, "http://127.0.0.1:9153/metrics"},
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Stop())
		}
	}()
	conf := filepath.Join(e.opts.OutDir, "zalando.Corefile")
	if err := os.WriteFile(conf, []byte(zalandoCorefile(e.nodeKubeconfig)), 0o644); err != nil {
		return nil, err
	}
	core, err := startProcess(e.opts.OutDir, n.Name+"-coredns", n.Netns, nil, e.bin("nodedns-backend"), "-conf", conf)
	if err != nil {
		return nil, err
	}
	r.Procs = append(r.Procs, core)
	r.stop = append(r.stop, core.Stop)
	if err := waitHTTP(ctx, core, n.Netns, "http://127.0.0.1:8181/ready", 2*time.Minute); err != nil {
		return nil, err
	}
	dm, err := startProcess(e.opts.OutDir, n.Name+"-dnsmasq", n.Netns, nil, "dnsmasq",
		"--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=", "--log-facility=-",
		"--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address="+nodeIP,
		"--cache-size=10000", "--server=127.0.0.1#5300", "--user=root")
	if err != nil {
		return nil, err
	}
	r.Procs = append(r.Procs, dm)
	r.stop = append(r.stop, dm.Stop)
	return r, waitDNS(ctx, dm, n.Netns, r.Nameserver, time.Minute)
}

// nodednsValues are the chart values of the comparison: the defaults,
// with the upstream of this harness for the node's resolv.conf, rendered
// without a cluster (helm.WithoutCluster: no kube-dns Service, no hooks;
// the pod is what is compared).
var nodednsValues = helm.WithoutCluster(map[string]any{"upstreams": []any{UpstreamIP}})

func startNodedns(ctx context.Context, e *Env, n *simNode) (_ *running, err error) {
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, helm.Node{Name: n.Name, IP: n.IP.String()})
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	if err := e.startNodednsPeer(ctx); err != nil {
		return nil, err
	}
	r := &running{Nameserver: testbed.DNSServiceIP + ":53", Remote: []*process{e.peer}}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Stop())
		}
	}()
	// The pod's endpoint leaves the fallback Service after its processes
	// stop (r.stop runs last first).
	if err := e.addFallbackEndpoint(ctx, n.Name, n.IP.String()); err != nil {
		return nil, err
	}
	r.stop = append(r.stop, func() error { return e.removeFallbackEndpoint(context.Background(), n.Name) })
	if _, err := n.kp.WaitForRules(ctx, fallbackEndpoint(n.IP.String()), fallbackEndpoint(e.central.IP.String())); err != nil {
		return nil, fmt.Errorf("kube-proxy on %s: fallback endpoints: %w", n.Name, err)
	}
	dir := filepath.Join(e.opts.OutDir, "nodedns-"+n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, c := range cs {
		argv, err := e.containerArgv(c, dir)
		if err != nil {
			return nil, err
		}
		start := func() (*process, error) {
			return startProcess(e.opts.OutDir, n.Name+"-"+c.Spec.Name, n.Netns, c.Env, argv...)
		}
		p, err := start()
		if err != nil {
			return nil, err
		}
		r.Procs = append(r.Procs, p)
		r.stop = append(r.stop, func() error { return stopLatest(r, c.Spec.Name, p) })
		switch c.Spec.Name {
		case "backend":
			r.Backend = p
			r.backendReady = probeURL(c.Spec.ReadinessProbe, "127.0.0.1")
			// The chart binds the backend's metrics to the node's IP.
			r.APITier = metricsTarget{n.Netns, "http://" + net.JoinHostPort(n.IP.String(), "9153") + "/metrics"}
			// kubelet starts the frontend once the sidecar's startup probe passes.
			if err := waitHTTP(ctx, p, n.Netns, probeURL(c.Spec.StartupProbe, "127.0.0.1"), 2*time.Minute); err != nil {
				return nil, err
			}
		case "frontend":
			r.Frontend = p
			r.restartFrontend = start
			if err := waitHTTP(ctx, p, n.Netns, probeURL(c.Spec.ReadinessProbe, "127.0.0.1"), 2*time.Minute); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// startNodednsPeer starts, once per Env, the nodedns backend of the other
// node: the chart's backend container rendered for that node, in its
// namespace beside the central CoreDNS (no port overlaps: its probe
// address is in 127/8, and both CoreDNS metrics listeners on 9153 set
// SO_REUSEPORT, the central one on CentralIP). Its fallback listener
// (fallbackPort on the node IP) becomes the second endpoint of nodedns-fallback,
// as on a cluster of two nodedns nodes. Only the backend: nothing there
// talks to that node's frontend.
func (e *Env) startNodednsPeer(ctx context.Context) error {
	if e.peer != nil {
		return nil
	}
	node := helm.Node{Name: e.central.Name, IP: e.central.IP.String()}
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, node)
	if err != nil {
		return fmt.Errorf("render the chart: %w", err)
	}
	for _, c := range cs {
		if c.Spec.Name != "backend" {
			continue
		}
		dir := filepath.Join(e.opts.OutDir, "nodedns-"+node.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		argv, err := e.containerArgv(c, dir)
		if err != nil {
			return err
		}
		p, err := startProcess(e.opts.OutDir, node.Name+"-"+c.Spec.Name, e.central.Netns, c.Env, argv...)
		if err != nil {
			return err
		}
		if err := waitHTTP(ctx, p, e.central.Netns, probeURL(c.Spec.StartupProbe, "127.0.0.1"), 2*time.Minute); err != nil {
			return errors.Join(fmt.Errorf("nodedns backend on %s: %w", node.Name, err), p.Stop())
		}
		if err := e.addFallbackEndpoint(ctx, node.Name, node.IP); err != nil {
			return errors.Join(err, p.Stop())
		}
		e.peer = p
		e.cleanups = append(e.cleanups, p.Stop)
		return nil
	}
	return errors.New("the chart renders no backend container")
}

// fallbackPort is the port of the backends' fallback listener on the
// node's IP, and so of the nodedns-fallback Service, as the chart renders
// them with the comparison's values (NODEDNS_FALLBACK_PORT of the backend
// container; the frontend's --fallback and the holder's --relay name the
// Service on the same port).
func fallbackPort() (int32, error) {
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, helm.Node{Name: "node", IP: "10.1.0.1"})
	if err != nil {
		return 0, fmt.Errorf("render the chart: %w", err)
	}
	for _, c := range cs {
		for _, env := range c.Env {
			if v, ok := strings.CutPrefix(env, "NODEDNS_FALLBACK_PORT="); ok {
				p, err := strconv.ParseUint(v, 10, 16)
				if err != nil || p == 0 {
					return 0, fmt.Errorf("the chart renders NODEDNS_FALLBACK_PORT=%q", v)
				}
				return int32(p), nil
			}
		}
	}
	return 0, errors.New("the chart renders no NODEDNS_FALLBACK_PORT")
}

// fallbackEndpoint is ip on the fallback port, as kube-proxy's rules
// name the endpoint.
func fallbackEndpoint(ip string) string {
	p, err := fallbackPort()
	if err != nil {
		return ip // createObjects already failed on it
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(p)))
}

// stopLatest stops the newest process of a container (chaos may have
// replaced it).
func stopLatest(r *running, name string, p *process) error {
	switch {
	case name == "frontend" && r.Frontend != nil:
		p = r.Frontend
	case name == "backend" && r.Backend != nil:
		p = r.Backend
	}
	return p.Stop()
}

// probeURL is the URL kubelet would probe: the probe's host when it names
// one (the chart's probe address), else host.
func probeURL(p *corev1.Probe, host string) string {
	if p == nil || p.HTTPGet == nil {
		return ""
	}
	if p.HTTPGet.Host != "" {
		host = p.HTTPGet.Host
	}
	return fmt.Sprintf("http://%s:%s%s", host, p.HTTPGet.Port.String(), p.HTTPGet.Path)
}

// kubernetesBlock matches the opening line of the backend's kubernetes
// stanza: the plugin's own directive or nodedns_kubernetes, which takes the
// same stanza (backend/kubespec).
var kubernetesBlock = regexp.MustCompile(`(?m)^(\s*)(nodedns_)?kubernetes .*\{\s*$`)

// containerArgv turns a rendered container into a command line here: the
// binary from BinDir, ConfigMap volumes written under dir, the handover
// hostPath moved under dir (tests of other packages use /run/nodedns),
// and, in the backend's Corefile, a kubeconfig standing for the in-cluster
// ServiceAccount.
func (e *Env) containerArgv(c helm.Container, dir string) ([]string, error) {
	cs, err := helm.Render(nodednsValues, helm.Options{})
	if err != nil {
		return nil, err
	}
	objs, err := cs.Objects()
	if err != nil {
		return nil, err
	}
	ds, err := helm.DaemonSet(objs)
	if err != nil {
		return nil, err
	}
	cms := helm.ConfigMaps(objs)
	replace := map[string]string{}
	for _, m := range c.Spec.VolumeMounts {
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			local := filepath.Join(dir, c.Spec.Name, strings.TrimPrefix(m.MountPath, "/"))
			switch {
			case v.ConfigMap != nil:
				cm, ok := cms[v.ConfigMap.Name]
				if !ok {
					return nil, fmt.Errorf("ConfigMap %s not rendered", v.ConfigMap.Name)
				}
				if err := os.MkdirAll(local, 0o755); err != nil {
					return nil, err
				}
				for k, data := range cm.Data {
					if k == "Corefile" {
						data = kubernetesBlock.ReplaceAllString(data, "$0\n${1}    kubeconfig "+e.nodeKubeconfig)
					}
					if err := os.WriteFile(filepath.Join(local, k), []byte(data), 0o644); err != nil {
						return nil, err
					}
				}
				replace[m.MountPath] = local
			case v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate:
				if err := os.MkdirAll(local, 0o755); err != nil {
					return nil, err
				}
				replace[m.MountPath] = local
			case v.EmptyDir != nil:
				// One per pod, shared by the containers that mount it
				// (the frontend and the socket holder).
				shared := filepath.Join(dir, "emptydir", v.Name)
				if err := os.MkdirAll(shared, 0o755); err != nil {
					return nil, err
				}
				replace[m.MountPath] = shared
			}
		}
	}
	argv := []string{e.bin(c.Command[0])}
	for _, a := range c.Command[1:] {
		argv = append(argv, replacePath(a, replace))
	}
	return argv, nil
}

// replacePath moves the path of an argument (the whole of it, or the value
// of a --flag=value) under the directory replace maps its mount path to.
// Only a whole mount path or one followed by "/" is replaced: one mount
// path may be a prefix of another's name (/run/nodedns,
// /run/nodedns-holder).
func replacePath(arg string, replace map[string]string) string {
	prefix, val := "", arg
	if i := strings.Index(arg, "="); i >= 0 && strings.HasPrefix(arg, "-") {
		prefix, val = arg[:i+1], arg[i+1:]
	}
	for from, to := range replace {
		if val == from || strings.HasPrefix(val, from+"/") {
			return prefix + to + val[len(from):]
		}
	}
	return arg
}
