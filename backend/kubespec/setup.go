// Package kubespec is the nodedns_kubernetes directive: CoreDNS's
// kubernetes plugin, with the same stanza, whose EndpointSlice watch is
// narrowed to the slices the Kubernetes DNS specification needs (Selectors)
// unless the stanza says "endpointslices all".
//
// The plugin itself parses the stanza, answers and reports readiness; only
// its source of objects (its APIConn) is replaced, by Controller.
package kubespec

import (
	"fmt"
	"net"
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the directive.
const Name = "nodedns_kubernetes"

// kubernetesDirective is the plugin whose setup does the work.
const kubernetesDirective = "kubernetes"

func init() { plugin.Register(Name, setup) }

func setup(c *caddy.Controller) error {
	var toks []caddyfile.Token
	for c.Next() {
		toks = append(toks, caddyfile.Token{File: c.File(), Line: c.Line(), Text: c.Val()})
	}
	o, rest, err := scan(toks)
	if err != nil {
		return plugin.Error(Name, err)
	}
	if err := o.validate(); err != nil {
		return plugin.Error(Name, err)
	}
	kubeSetup, err := caddy.DirectiveAction("dns", kubernetesDirective)
	if err != nil {
		return plugin.Error(Name, fmt.Errorf("the kubernetes plugin is not linked in: %w", err))
	}

	// The kubernetes plugin's setup reads the same controller: its
	// dispenser now holds the stanza without the endpointslices
	// property. It adds its handler last to the server block's chain.
	cfg := dnsserver.GetConfig(c)
	n := len(cfg.Plugin)
	c.Dispenser = caddyfile.NewDispenserTokens("", rest)
	if err := kubeSetup(c); err != nil {
		return err
	}
	if o.full() {
		if o.snapshotDir != "" {
			// One environment variable sets it for every watch mode.
			log.Warningf("%s %s: ignored with %q or noendpoints: the kubernetes plugin's own controller serves, which keeps no snapshot", snapshotProperty, o.snapshotDir, property+" "+WatchAll)
		}
		return nil
	}
	if len(cfg.Plugin) != n+1 {
		return plugin.Error(Name, fmt.Errorf("the kubernetes plugin added %d handlers, want 1", len(cfg.Plugin)-n))
	}
	// The function returns the plugin's one *Kubernetes each time it is
	// called; building the chain later sets its Next again.
	k, ok := cfg.Plugin[n](nil).(*kubernetes.Kubernetes)
	if !ok {
		return plugin.Error(Name, fmt.Errorf("the kubernetes plugin's handler is %T", cfg.Plugin[n](nil)))
	}
	ctl, err := controllerFor(k, o, dnsAddr(cfg))
	if err != nil {
		return plugin.Error(Name, err)
	}
	// The plugin's start-up and shutdown hooks, and its handler, read
	// APIConn when they run: all of them after setup.
	k.APIConn = ctl
	// Runs after the plugin's start-up hook (hooks run in the order
	// added), which returns once HasSynced is true or startup_timeout
	// has passed.
	c.OnStartup(func() error { ctl.Started(); return nil })
	return nil
}

// controllerFor builds the spec-watch Controller for the parsed plugin k.
func controllerFor(k *kubernetes.Kubernetes, o options, dnsAddr string) (*Controller, error) {
	if o.snapshotDir != "" {
		if err := os.MkdirAll(o.snapshotDir, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", snapshotProperty, err)
		}
	}
	rc, err := restConfig(k, o)
	if err != nil {
		return nil, err
	}
	client, err := newAPIClient(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	co := controllerOptions{pods: o.podsVerified, zonal: o.zonal, snapshotDir: o.snapshotDir, dnsAddr: dnsAddr}
	if co.selector, err = selector(o.labels); err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	if co.namespaceSelector, err = selector(o.namespaceLabels); err != nil {
		return nil, fmt.Errorf("namespace_labels: %w", err)
	}
	return newController(client, co)
}

// dnsAddr is the server block's first listen address (bind's, set up
// before this plugin), host:port; loopback when it binds every address.
func dnsAddr(cfg *dnsserver.Config) string {
	if cfg.Port == "" {
		return ""
	}
	host := ""
	if len(cfg.ListenHosts) > 0 {
		host = cfg.ListenHosts[0]
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, cfg.Port)
}

func selector(s string) (labels.Selector, error) {
	if s == "" {
		return nil, nil
	}
	ls, err := metav1.ParseToLabelSelector(s)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", s, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", s, err)
	}
	return sel, nil
}
