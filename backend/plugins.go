package main

import (
	// Each blank import registers one plugin with Caddy. The list matches
	// directives below; `nodedns-backend -plugins` prints exactly these.
	_ "github.com/coredns/coredns/plugin/acl"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"

	// nodedns_bind: bind for comma-separated address lists, as the
	// downward API's status.hostIPs gives them (backend/bindlist).
	_ "github.com/nodedns/nodedns/backend/bindlist"
	// nodedns_client: the pod's address, passed by the frontend, as the
	// query's source (backend/clientaddr).
	_ "github.com/nodedns/nodedns/backend/clientaddr"
	// nodedns_kubernetes: the kubernetes plugin with the EndpointSlice
	// watches the DNS specification needs.
	_ "github.com/nodedns/nodedns/backend/kubespec"
	// nodedns_acl: the fallback listener's source policy (local, the
	// Node objects' pod CIDRs and addresses, prefixes).
	_ "github.com/nodedns/nodedns/backend/srcacl"
)

// directives is the plugin chain order: a query passes through the plugins a
// server block uses in this order, whatever their order in the Corefile. It
// is CoreDNS's own order (plugin.cfg of v1.15.0) restricted to the plugins
// above, so every plugin sees the others exactly as in a stock CoreDNS;
// nodedns_client comes before every plugin that reads a query's source.
var directives = []string{
	"reload",             // re-reads the Corefile every 30s; a ConfigMap edit applies without a restart
	"bufsize",            // caps the EDNS0 UDP size before anything answers
	"bind",               // chooses listen addresses (setup only; not in the query path)
	"nodedns_bind",       // the same for comma-separated lists: every address of a dual-stack node (backend/bindlist)
	"ready",              // /ready on :8181 once the kubernetes plugin has synced (setup only)
	"health",             // /health on :9155 with lameduck (setup only)
	"nodedns_client",     // the frontend's pod address as the query's source, before anything reads it (backend/clientaddr)
	"prometheus",         // wraps everything below so each answer is counted (plugin/metrics)
	"errors",             // logs errors returned by the plugins below
	"log",                // query log, off in the default Corefile
	"loadbalance",        // shuffles A/AAAA answers on the way out
	"rewrite",            // rewrites names before cache and kubernetes see them
	"acl",                // static allow/block lists (the default Corefile uses nodedns_acl instead)
	"nodedns_acl",        // refuses the fallback listener's queries from outside the node's and the cluster's networks
	"cache",              // caches forwarded answers (cluster.local is answered from memory)
	"template",           // synthesises answers for patterns (e.g. blocking a search-path suffix)
	"hosts",              // static entries, before kubernetes
	"kubernetes",         // cluster.local and the reverse zones from Services, EndpointSlices, Namespaces
	"nodedns_kubernetes", // the same plugin watching only the slices the DNS spec needs (backend/kubespec)
	"loop",               // detects forwarding loops at startup (setup-time probe)
	"forward",            // everything else to the node's resolvers
}
