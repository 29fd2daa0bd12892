// Command nodedns-backend is the backend of nodedns: CoreDNS v1.15.0 built as
// a library with a curated plugin list and a default Corefile embedded in the
// binary. It takes CoreDNS's command line (-conf, -dns.port, -plugins,
// -version, ...).
package main

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	"github.com/nodedns/nodedns/backend/handoff"
)

// version is stamped by the Makefile (-ldflags -X main.version=...).
var version = "dev"

// defaultCorefile is used when -conf is not given. Unlike stock CoreDNS, a
// ./Corefile in the working directory is not read: what the binary serves
// does not depend on where it was started.
//
//go:embed Corefile
var defaultCorefile []byte

// envDefaults are the values of the environment variables the default
// Corefile refers to ({$NAME}) when they are unset or empty. Caddy replaces an
// unset variable with the empty string, which would leave directives without
// arguments.
var envDefaults = []struct{ name, value string }{
	{"NODEDNS_BIND", "127.0.0.1"},          // IPv4 address of the listener for this node's frontend
	{"NODEDNS_PORT", "5300"},               // its port
	{"NODEDNS_FALLBACK_PORT", "5301"},      // port of the listener for other nodes' frontends
	{"NODEDNS_FALLBACK_BIND", "127.0.0.1"}, // its addresses, comma-separated; the chart sets the node IPs
	// Who it answers (nodedns_acl): the node's networks and the Node
	// objects' pod CIDRs and addresses; comma-separated words and prefixes.
	{"NODEDNS_FALLBACK_ALLOW", "local,nodes"},
	{"NODEDNS_CLUSTER_DOMAIN", "cluster.local"},
	{"NODEDNS_UPSTREAM", "/etc/resolv.conf"}, // forward targets: a resolv.conf path or addresses
	{"NODEDNS_ENDPOINTSLICES", "spec"},       // nodedns_kubernetes: spec (the DNS specification's slices) or all
	{"NODEDNS_SNAPSHOT_DIR", "none"},         // nodedns_kubernetes and nodedns_acl: where their snapshots are kept; none: nowhere
	// The HTTP listeners default to loopback, the narrowest address that
	// works for a plain run; the chart sets the probe address and the node IP.
	{"NODEDNS_HEALTH", "127.0.0.1:9155"},  // /health, with lameduck
	{"NODEDNS_READY", "127.0.0.1:8181"},   // /ready
	{"NODEDNS_METRICS", "127.0.0.1:9153"}, // /metrics
}

func main() {
	// The chart's Helm hooks run the same image as `nodedns-backend
	// handoff ...` (backend/handoff): no second image to build and pull.
	if len(os.Args) > 1 && os.Args[1] == "handoff" {
		os.Exit(handoff.Main(os.Args[2:], os.Stderr))
	}
	if listPlugins(os.Args[1:]) {
		// coremain's -plugins lists every plugin package linked in, which
		// includes four that forward, kubernetes and cache import for their
		// own use (debug, dnstap, metadata, transfer). A Corefile cannot use
		// those: only directives are accepted. Print what it can use.
		for _, d := range directives {
			fmt.Println(d)
		}
		return
	}
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "nodedns-backend:", err)
		os.Exit(1)
	}
	coremain.Run()
}

// setup does what must happen before coremain.Run parses flags and loads the
// Corefile: the plugin order, the embedded Corefile and the variable defaults.
func setup() error {
	if err := dnsserver.SetDirectives(directives); err != nil {
		return fmt.Errorf("set directives: %w", err)
	}
	for _, e := range envDefaults {
		if os.Getenv(e.name) != "" {
			continue
		}
		if err := os.Setenv(e.name, e.value); err != nil {
			return fmt.Errorf("set default %s: %w", e.name, err)
		}
	}
	// Replaces coremain's loader of ./Corefile. The -conf loader still runs
	// first and wins when the flag is given.
	caddy.SetDefaultCaddyfileLoader("embedded", caddy.LoaderFunc(embeddedLoader))
	coremain.GitCommit = "nodedns-" + version
	return nil
}

// listPlugins reports whether args ask for the plugin list, spelled as the
// flag package accepts it.
func listPlugins(args []string) bool {
	for _, a := range args {
		switch a {
		case "-plugins", "--plugins", "-plugins=true", "--plugins=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

func embeddedLoader(serverType string) (caddy.Input, error) {
	return caddy.CaddyfileInput{
		Contents:       defaultCorefile,
		Filepath:       "Corefile (embedded)",
		ServerTypeName: serverType,
	}, nil
}
