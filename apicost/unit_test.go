package apicost

import (
	"math"
	"testing"
)

func TestApiserverCounters(t *testing.T) {
	text := []byte(`# HELP apiserver_watch_events_total x
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="discovery.k8s.io",resource="endpointslices",version="v1"} 10
apiserver_watch_events_total{group="",resource="pods",version="v1"} 1000
apiserver_watch_events_sizes_sum{group="discovery.k8s.io",resource="endpointslices",version="v1"} 20480
apiserver_watch_events_sizes_sum{group="",resource="services",version="v1"} 1.5e+03
apiserver_longrunning_requests{component="apiserver",group="",resource="services",scope="cluster",subresource="",verb="WATCH",version="v1"} 7
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="cluster",subresource="",verb="LIST",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="",verb="POST",version="v1"} 40
apiserver_response_sizes_sum{component="apiserver",group="",resource="services",scope="cluster",subresource="",verb="LIST",version="v1"} 8192
weird_metric{a="with \"quote\", comma",b="}"} 1
`)
	c := apiserverCounters(text)
	want := apiCounters{WatchEvents: 10, WatchBytes: 21980, Watches: 10, Lists: 4, ListBytes: 8192}
	if c.WatchEvents != want.WatchEvents || c.WatchBytes != want.WatchBytes || c.Watches != want.Watches || c.Lists != want.Lists || c.ListBytes != want.ListBytes {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if c.WatchesBy["services"] != 7 || c.WatchesBy["nodes"] != 3 {
		t.Errorf("watches by resource: %v", c.WatchesBy)
	}
	s := parseMetrics(text, func(n string) bool { return n == "weird_metric" })
	if len(s) != 1 || s[0].labels["a"] != `with "quote", comma` || s[0].labels["b"] != "}" || s[0].value != 1 {
		t.Errorf("escaped labels: %+v", s)
	}
}

func TestParseStatCPU(t *testing.T) {
	// comm with a space and a parenthesis; utime 250, stime 50 ticks.
	stat := []byte("1234 (kube (api) server) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0")
	cpu, err := parseStatCPU(stat)
	if err != nil || cpu != 3 {
		t.Errorf("got %v, %v; want 3s", cpu, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("no error for a malformed stat")
	}
	rss, hwm := parseStatusMemory([]byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"))
	if rss != 1 || hwm != 2 {
		t.Errorf("rss %v hwm %v, want 1 and 2 MiB", rss, hwm)
	}
}

func TestFitLine(t *testing.T) {
	f := fitLine([]float64{0, 10, 30, 50}, []float64{1, 21, 61, 101})
	if math.Abs(f.PerNode-2) > 1e-9 || math.Abs(f.Intercept-1) > 1e-9 || math.Abs(f.R2-1) > 1e-9 {
		t.Errorf("exact line: %+v", f)
	}
	if got := f.At(5000); math.Abs(got-10001) > 1e-6 {
		t.Errorf("At(5000) = %v", got)
	}
	if f := fitLine([]float64{3}, []float64{1}); f.PerNode != 0 || !math.IsNaN(f.R2) {
		t.Errorf("one point: %+v", f)
	}
}

func TestValidate(t *testing.T) {
	base := DefaultConfig()
	base.WatchCommand = []string{"x"}
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no nodes":        func(c *Config) { c.Nodes = nil },
		"unsorted":        func(c *Config) { c.Nodes = []int{30, 10} },
		"zero services":   func(c *Config) { c.Services = 0 },
		"churn no tick":   func(c *Config) { c.ChurnInterval = 0 },
		"no window":       func(c *Config) { c.Window = 0 },
		"no watch cmd":    func(c *Config) { c.WatchCommand = nil },
		"too many nodes":  func(c *Config) { c.Nodes = []int{501} },
		"no backend path": func(c *Config) { c.BackendBinary = "" },
	} {
		c := base
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}

	// -simulate replaces the node counts.
	sim := base
	sim.Nodes, sim.Simulate, sim.SimCommand = nil, []int{1000, 5000}, []string{"y"}
	if err := sim.Validate(); err != nil {
		t.Fatalf("simulate: %v", err)
	}
	if got := sim.maxNodes(); got != 5000 {
		t.Errorf("simulate: %d Node objects, want 5000", got)
	}
	for name, mut := range map[string]func(*Config){
		"unsorted":        func(c *Config) { c.Simulate = []int{5000, 1000} },
		"too many":        func(c *Config) { c.Simulate = []int{10001} },
		"no sim command":  func(c *Config) { c.SimCommand = nil },
		"no churn":        func(c *Config) { c.ChurnEndpoints = 0 },
		"calibrate > 500": func(c *Config) { c.SimCalibrate = 501 },
	} {
		c := sim
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("simulate, %s: no error", name)
		}
	}
}
