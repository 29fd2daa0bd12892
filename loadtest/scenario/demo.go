package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/testbed"
)

// demoNames are resolved one by one from the pod in the demo: cluster
// names of both namespaces and an external one, each twice (the second
// answer comes from the frontend's cache).
var demoNames = []string{
	"kubernetes.default.svc.cluster.local.",
	"svc-3.team-a.svc.cluster.local.",
	"svc-7.team-b.svc.cluster.local.",
	"www1.example.com.",
}

// Demo shows nodedns on a simulated node of the testbed: rendered from
// the chart, answering a pod's queries from its cache, without conntrack
// entries; then the comparison cfg. It writes what it shows to w.
func Demo(ctx context.Context, e *Env, cfg Config, w io.Writer) (*Report, error) {
	section := func(s string) { fmt.Fprintf(w, "\n=== %s\n", s) }
	section("1. a node running nodedns as the chart renders it")
	n, err := e.addNode(ctx, "node-demo")
	if err != nil {
		return nil, err
	}
	nodeClosed := false
	defer func() {
		if !nodeClosed {
			_ = n.Close()
		}
	}()
	fmt.Fprintf(w, "node %s: netns %s, InternalIP %s, kube-proxy (iptables mode) programmed kube-dns %s\n", n.Name, n.Netns, n.IP, testbed.DNSServiceIP)
	fmt.Fprintf(w, "pod netns %s: %d pod addresses %s-%s, default route via the node\n", n.Pod.Name, len(n.PodIPs), n.PodIPs[0], n.PodIPs[len(n.PodIPs)-1])
	r, err := startNodedns(ctx, e, n)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Stop() }()
	for _, p := range r.Procs {
		fmt.Fprintf(w, "started %s (pid %d), log %s\n", p.Name, p.PID(), p.LogPath)
	}
	if out, err := n.exec(ctx, "ip", "-br", "addr", "show", "dev", "nodedns"); err == nil {
		fmt.Fprintf(w, "frontend's interface: %s", out)
	}

	section("2. lookups from the pod to " + r.Nameserver + " (the pods' unchanged resolv.conf nameserver)")
	before, err := frontendCounters(ctx, n)
	if err != nil {
		return nil, err
	}
	for _, name := range demoNames {
		for i := range 2 {
			m, rtt, err := queryIn(n.Pod.Name, r.Nameserver, name, dns.TypeA)
			if err != nil {
				return nil, fmt.Errorf("query %s from the pod: %w", name, err)
			}
			var ans []string
			for _, rr := range m.Answer {
				if a, ok := rr.(*dns.A); ok {
					ans = append(ans, a.A.String())
				}
			}
			which := "first"
			if i == 1 {
				which = "again"
			}
			fmt.Fprintf(w, "  %-40s %-5s %-8s %-22s %v\n", name, which, dns.RcodeToString[m.Rcode], strings.Join(ans, ","), rtt.Round(10*time.Microsecond))
		}
	}
	fmt.Fprintf(w, "and a pod's stub resolver (search path, A+AAAA), 3s at 100 lookups/s of short Service names:\n")
	lc := cfg
	lc.Rate, lc.Mix = 100, "cluster"
	res, err := e.generate(ctx, n, r.Nameserver, lc, 3*time.Second, "demo", nil)
	if err != nil {
		return nil, err
	}
	_ = res.WriteText(indent{w})

	section("3. answered on the node, from the frontend's cache")
	after, err := frontendCounters(ctx, n)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "frontend metrics (node IP :9253): requests +%.0f, cache hits +%.0f, cache misses +%.0f (misses went to the backend on 127.0.0.1:5300)\n",
		after.requests-before.requests, after.hits-before.hits, after.misses-before.misses)
	tx, _ := txPackets(ctx, n.Netns, NodeUplink)
	fmt.Fprintf(w, "packets sent toward other nodes (%s) since the node started: %d\n", NodeUplink, tx)

	section("4. no conntrack entry for DNS")
	nat, _ := n.exec(ctx, "iptables-save", "-t", "nat")
	natRules := 0
	for _, l := range strings.Split(nat, "\n") {
		if strings.Contains(l, testbed.DNSServiceIP+"/32") {
			natRules++
		}
	}
	fmt.Fprintf(w, "kube-proxy's NAT rules for %s in the node: %d (conntrack is active in this netns)\n", testbed.DNSServiceIP, natRules)
	raw, _ := n.exec(ctx, "iptables-save", "-t", "raw")
	for _, l := range strings.Split(raw, "\n") {
		if strings.Contains(l, "NOTRACK") {
			fmt.Fprintf(w, "  raw: %s\n", l)
		}
	}
	list, err := n.exec(ctx, "conntrack", "-L")
	if err != nil {
		return nil, err
	}
	total, dnsEntries := 0, 0
	var sample []string
	for _, l := range strings.Split(list, "\n") {
		if !strings.Contains(l, "src=") {
			continue
		}
		total++
		if strings.Contains(l, "dport=53 ") && (strings.Contains(l, "dst="+testbed.DNSServiceIP+" ") || strings.Contains(l, "dst="+LocalIP+" ")) {
			dnsEntries++
			sample = append(sample, l)
		}
	}
	fmt.Fprintf(w, "conntrack -L in the node netns: %d entries in all (API server, backend connections), %d for port 53 of %s or %s\n", total, dnsEntries, testbed.DNSServiceIP, LocalIP)
	for _, l := range sample[:min(len(sample), 3)] {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if err := r.alive(); err != nil {
		return nil, err
	}
	errStop := errors.Join(r.Stop(), n.Close())
	nodeClosed = true
	if errStop != nil {
		return nil, errStop
	}

	section(fmt.Sprintf("5. the designs side by side: %d lookups/s for %v each, same mix (%s)", cfg.Rate, cfg.Duration, cfg.Mix))
	return Compare(ctx, e, cfg, w)
}

type counters struct{ requests, hits, misses float64 }

// frontendCounters reads the frontend's series on n, at the node's IP,
// where the chart binds its metrics.
func frontendCounters(ctx context.Context, n *simNode) (counters, error) {
	code, body, err := httpGet(ctx, n.Netns, "http://"+net.JoinHostPort(n.IP.String(), "9253")+"/metrics")
	if err != nil || code != 200 {
		return counters{}, fmt.Errorf("frontend metrics: status %d: %v", code, err)
	}
	return counters{
		requests: metricSum(body, "coredns_dns_requests_total"),
		hits:     metricSum(body, "coredns_cache_hits_total"),
		misses:   metricSum(body, "coredns_cache_misses_total"),
	}, nil
}

// indent prefixes every line with two spaces.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	s := strings.TrimRight(string(p), "\n")
	_, err := io.WriteString(i.w, "  "+strings.ReplaceAll(s, "\n", "\n  ")+"\n")
	return len(p), err
}
