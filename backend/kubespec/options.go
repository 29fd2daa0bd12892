package kubespec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// Watch modes of the endpointslices property.
const (
	// WatchSpec watches only the EndpointSlices that the Kubernetes DNS
	// specification needs (Selectors): the default.
	WatchSpec = "spec"
	// WatchAll watches every EndpointSlice, as the kubernetes plugin does.
	WatchAll = "all"
)

// property is the property nodedns_kubernetes adds to the kubernetes
// plugin's stanza for the EndpointSlice watch.
const property = "endpointslices"

// snapshotProperty names the directory of the store's snapshot
// (snapshot.go), served by a backend that starts with no API server.
const snapshotProperty = "snapshot"

// SnapshotNone as the snapshot directory keeps no snapshot.
const SnapshotNone = "none"

// options are what the controller needs from a stanza. The kubernetes plugin
// parses the same stanza (ParseStanza) into unexported fields, so the
// properties that shape its informers or its API client are read here too;
// the plugin validates them, and this scan only keeps their raw values.
type options struct {
	watch string // WatchSpec or WatchAll; WatchSpec when the property is absent

	noEndpoints        bool // noendpoints: no EndpointSlice watch at all
	ignoreEmptyService bool // ignore empty_service
	multicluster       bool // multicluster: ServiceImports and their slices
	podsVerified       bool // pods verified: a Pod watch
	zonal              bool // zonal: endpoints keep their zone

	labels          string // labels: selector of Services and EndpointSlices
	namespaceLabels string // namespace_labels: selector of Namespaces

	apiQPS         string // apiserver_qps
	apiBurst       string // apiserver_burst
	apiMaxInflight string // apiserver_max_inflight

	snapshotDir string // snapshot: directory of the store's snapshot; "" for none
}

// scan reads the options out of the tokens of one nodedns_kubernetes
// directive and returns the tokens without the endpointslices property,
// which is what the kubernetes plugin's parser accepts.
func scan(tokens []caddyfile.Token) (options, []caddyfile.Token, error) {
	o := options{watch: WatchSpec}
	d := caddyfile.NewDispenserTokens("", tokens)
	type line struct {
		file string
		line int
	}
	drop := map[line]bool{} // the lines of nodedns_kubernetes's own properties
	seen := 0
	watchSeen, snapshotSeen := false, false
	for d.Next() {
		if seen++; seen > 1 {
			return o, nil, errors.New("nodedns_kubernetes can only be used once per server block")
		}
		d.RemainingArgs() // zones
		for d.NextBlock() {
			name, file, ln := d.Val(), d.File(), d.Line()
			args := d.RemainingArgs()
			first := func() string {
				if len(args) == 0 {
					return ""
				}
				return args[0]
			}
			switch name {
			case property:
				if watchSeen {
					return o, nil, fmt.Errorf("%s given twice", property)
				}
				if len(args) != 1 || (args[0] != WatchSpec && args[0] != WatchAll) {
					return o, nil, fmt.Errorf("%s takes %q or %q, got %q", property, WatchSpec, WatchAll, args)
				}
				o.watch, watchSeen = args[0], true
				drop[line{file, ln}] = true
			case snapshotProperty:
				if snapshotSeen {
					return o, nil, fmt.Errorf("%s given twice", snapshotProperty)
				}
				if len(args) != 1 || args[0] == "" {
					return o, nil, fmt.Errorf("%s takes one directory, got %q", snapshotProperty, args)
				}
				o.snapshotDir = args[0]
				drop[line{file, ln}] = true
				snapshotSeen = true
			case "noendpoints":
				o.noEndpoints = true
			case "ignore":
				o.ignoreEmptyService = o.ignoreEmptyService || first() == "empty_service"
			case "multicluster":
				o.multicluster = true
			case "pods":
				o.podsVerified = first() == "verified"
			case "zonal":
				o.zonal = true
			case "labels":
				o.labels = strings.Join(args, " ")
			case "namespace_labels":
				o.namespaceLabels = strings.Join(args, " ")
			case "apiserver_qps":
				o.apiQPS = first()
			case "apiserver_burst":
				o.apiBurst = first()
			case "apiserver_max_inflight":
				o.apiMaxInflight = first()
			}
		}
	}
	if o.snapshotDir == SnapshotNone {
		o.snapshotDir = ""
	}
	if len(drop) == 0 {
		return o, tokens, nil
	}
	kept := make([]caddyfile.Token, 0, len(tokens))
	for _, t := range tokens {
		if drop[line{t.File, t.Line}] && t.Text != "{" && t.Text != "}" {
			continue
		}
		kept = append(kept, t)
	}
	return o, kept, nil
}

// validate refuses combinations that would silently answer wrong.
func (o options) validate() error {
	if o.watch != WatchSpec {
		return nil
	}
	if o.ignoreEmptyService {
		// ignore empty_service answers NXDOMAIN for a ClusterIP Service
		// without ready endpoints; the spec watch does not see the
		// endpoints of ClusterIP Services, so it would answer NXDOMAIN
		// for nearly all of them.
		return fmt.Errorf(`"ignore empty_service" needs the endpoints of every Service, which "%s %s" does not watch: `+
			`set "%s %s" (chart: backend.endpointSlices: all) or remove "ignore empty_service"`, property, WatchSpec, property, WatchAll)
	}
	if o.multicluster {
		return fmt.Errorf(`"multicluster" is not supported with "%s %s": set "%s %s" (chart: backend.endpointSlices: all)`,
			property, WatchSpec, property, WatchAll)
	}
	return nil
}

// full reports whether the kubernetes plugin's own controller serves: with
// endpointslices all, and with noendpoints, which watches no EndpointSlice
// at all and so already costs less than the spec watch.
func (o options) full() bool { return o.watch == WatchAll || o.noEndpoints }
