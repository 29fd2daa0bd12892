package difftest

import (
	"fmt"
	"strings"

	"github.com/nodedns/nodedns/helm"
)

// shape is a Corefile shape the chart renders: values over its defaults.
type shape struct {
	name string
	// values returns the chart values, spy being the upstream's address.
	values func(spy string) (map[string]any, error)
	// shared: the chart must render it with search-path prefetch and
	// denial below off (the kubernetes plugin does not alone answer the
	// cluster domain).
	shared bool
}

// defaultServers returns a copy of the chart's default servers list.
func defaultServers() ([]any, error) {
	c, err := helm.Load()
	if err != nil {
		return nil, err
	}
	data, err := yamlRoundTrip(c.Values["servers"])
	if err != nil {
		return nil, err
	}
	s, ok := data.([]any)
	if !ok || len(s) == 0 {
		return nil, fmt.Errorf("the chart's servers value is %T", c.Values["servers"])
	}
	return s, nil
}

// withPlugins returns servers with plugins added to the frontend's block
// (the first).
func withPlugins(servers []any, plugins ...map[string]any) []any {
	first := servers[0].(map[string]any)
	ps := first["plugins"].([]any)
	for _, p := range plugins {
		ps = append(ps, p)
	}
	first["plugins"] = ps
	return servers
}

func parse(yaml string) (map[string]any, error) { return helm.ParseValues(yaml) }

// shapes are the chart's default and each Corefile shape it can render:
// stub domains (outside and inside the cluster domain), servers entries
// with hosts and rewrite in the frontend's block, and a custom zone
// outside the cluster domain.
var shapes = []shape{
	{name: "default", values: func(spy string) (map[string]any, error) {
		return parse(fmt.Sprintf("upstreams: [%q]", spy))
	}},
	{name: "stub-domains", shared: true, values: func(spy string) (map[string]any, error) {
		return parse(fmt.Sprintf("upstreams: [%[1]q]\nstubDomains: {corp.example: [%[1]q], legacy.cluster.local: [%[1]q]}", spy))
	}},
	{name: "servers", shared: true, values: func(spy string) (map[string]any, error) {
		v, err := parse(fmt.Sprintf("upstreams: [%q]", spy))
		if err != nil {
			return nil, err
		}
		s, err := defaultServers()
		if err != nil {
			return nil, err
		}
		v["servers"] = withPlugins(s,
			map[string]any{"name": "hosts", "parameters": "/dev/null cluster.local",
				"configBlock": "10.99.0.1 legacy." + nsA + ".svc.cluster.local\nfallthrough"},
			map[string]any{"name": "rewrite",
				"parameters": "name exact old-web." + nsA + ".svc.cluster.local web." + nsA + ".svc.cluster.local"},
		)
		return v, nil
	}},
	{name: "custom-zone", values: func(spy string) (map[string]any, error) {
		v, err := parse(fmt.Sprintf("upstreams: [%q]", spy))
		if err != nil {
			return nil, err
		}
		s, err := defaultServers()
		if err != nil {
			return nil, err
		}
		v["servers"] = append(s, map[string]any{
			"zones": []any{map[string]any{"zone": "corp.internal."}},
			"port":  "{$NODEDNS_PORT}",
			"plugins": []any{
				map[string]any{"name": "bind", "parameters": "{$NODEDNS_BIND}"},
				map[string]any{"name": "errors"},
				map[string]any{"name": "hosts", "parameters": "/dev/null",
					"configBlock": "10.99.1.1 a.corp.internal\n10.99.1.2 b.corp.internal"},
			},
		})
		return v, nil
	}},
}

func shapeNames() string {
	var n []string
	for _, s := range shapes {
		n = append(n, s.name)
	}
	return strings.Join(n, ", ")
}
