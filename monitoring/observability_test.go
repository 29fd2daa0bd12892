package monitoring

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

// rateInterval stands for Grafana's $__rate_interval: at least four scrape
// intervals (2s here), with room for a late scrape on a busy machine.
const rateInterval = 20 * time.Second

// peerAddr holds a second backend in the node namespace, standing for
// other nodes' backends behind the fallback Service.
const peerAddr = "127.0.0.2"

// chartValues are the chart values of the test node: the defaults, with
// this test's upstream, a 1s reconcile (so a setup error clears fast), and
// the ServiceMonitor (2s scrapes), the alert rules and the dashboard on.
var chartValues = map[string]any{
	"upstreams":    []any{upstreamAddr},
	"syncInterval": "1s",
	"prometheus": map[string]any{
		"monitor": map[string]any{"enabled": true, "interval": "2s"},
		"rules":   map[string]any{"enabled": true},
	},
	"dashboards": map[string]any{"enabled": true},
}

// TestObservability runs the chart's pod on a testbed node, sends it the
// traffic an operator's dashboards show (hits, misses, NXDOMAIN, SERVFAIL,
// a setup error, fallback use), lints both binaries' /metrics with
// `promtool check metrics`, and has a real Prometheus scrape the node as
// the chart's ServiceMonitor describes. Then every query of the shipped
// Grafana dashboard must return a series for the node, and every alert
// rule of the chart must load, evaluate without error, and select series
// that exist.
func TestObservability(t *testing.T) {
	if r := testbed.UnavailableNodes(); r != "" {
		t.Skip("testbed: " + r)
	}
	if r := prometheusUnavailable(); r != "" {
		t.Skip(r)
	}
	bins := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	tb := testbed.StartForTest(t, testbed.Options{})
	node, err := tb.AddNode(ctx, "node-a", "")
	if err != nil {
		t.Fatalf("add node: %v", err)
	}
	kubeconfig, err := tb.NodeKubeconfig(ctx, tb.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := node.Netns
	startUpstream(t, ns)

	r, err := helm.Render(helm.WithoutCluster(chartValues), helm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	cms := helm.ConfigMaps(objs)
	corefile := cms["nodedns-backend"].Data["Corefile"]
	dashboard := ""
	for _, cm := range cms {
		if cm.Labels["grafana_dashboard"] == "1" {
			dashboard = cm.Data["nodedns.json"]
		}
	}
	if dashboard == "" {
		t.Fatalf("no dashboard ConfigMap rendered: %s", helm.Kinds(objs))
	}
	cs, err := helm.NodeContainers(helm.WithoutCluster(chartValues), helm.Options{}, helm.Node{Name: node.Name, IP: node.IP.String()})
	if err != nil {
		t.Fatal(err)
	}
	var fe, be helm.Container
	for _, c := range cs {
		switch c.Spec.Name {
		case "frontend":
			fe = c
		case "backend":
			be = c
		}
	}
	dir := t.TempDir()
	mk := func(c helm.Container, name string, override map[string]string) container {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		rc, err := runnable(c, corefile, kubeconfig, bins, d, override)
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	backend := mk(be, "backend", nil)
	peer := mk(be, "peer", map[string]string{
		"NODEDNS_BIND": peerAddr, "NODEDNS_FALLBACK_BIND": peerAddr,
		"NODEDNS_READY": peerAddr + ":8181", "NODEDNS_HEALTH": peerAddr + ":9155", "NODEDNS_METRICS": peerAddr + ":9153",
	})
	// The peer's fallback listener is on the port the chart gives the
	// backend's (53 in iptables mode, where nodedns pods serve kube-dns).
	fallbackPort := ""
	for _, kv := range be.Env {
		if v, ok := strings.CutPrefix(kv, "NODEDNS_FALLBACK_PORT="); ok {
			fallbackPort = v
		}
	}
	if fallbackPort == "" {
		t.Fatal("the backend has no NODEDNS_FALLBACK_PORT")
	}
	handover := filepath.Join(dir, "handover")
	frontend := mk(fe, "frontend", map[string]string{
		"--fallback":     net.JoinHostPort(peerAddr, fallbackPort),
		"--handover-dir": handover,
	})
	backendReady := probeURL(be.Spec.ReadinessProbe)
	frontendReady := probeURL(fe.Spec.ReadinessProbe)
	feMetrics := "http://" + net.JoinHostPort(node.IP.String(), "9253") + "/metrics"
	beMetrics := "http://" + net.JoinHostPort(node.IP.String(), "9153") + "/metrics"

	ready := func(url string) func() error {
		return func() error {
			code, body, err := get(ctx, ns, url)
			if err == nil && code != 200 {
				err = fmt.Errorf("%s: %d %s", url, code, strings.TrimSpace(body))
			}
			return err
		}
	}
	pp := peer.start(t, ns, "peer backend")
	waitFor(t, 2*time.Minute, "peer backend ready", pp, ready("http://"+peerAddr+":8181/ready"))
	bp := backend.start(t, ns, "backend")
	waitFor(t, 2*time.Minute, "backend ready", bp, ready(backendReady))

	// Prometheus scrapes from before the frontend starts, so the traffic
	// below shows in its rates.
	sm, svc, err := chartMonitoring(chartValues)
	if err != nil {
		t.Fatal(err)
	}
	scs, err := scrapeConfigs(sm, svc, pod{Name: "nodedns-" + node.Name, Node: node.Name, IP: node.IP})
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := writeRules(t, objs, dir)
	prom := startPrometheus(t, ns, scs, rulesFile)

	// A setup error: a link of another type holds the interface's name,
	// so the first syncs fail (op="link") until it goes away.
	if out, err := node.Run(ctx, "ip", "link", "add", "nodedns", "type", "veth", "peer", "name", "nodedns-peer"); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	fp := frontend.start(t, ns, "frontend")
	waitFor(t, time.Minute, "a setup error counted", fp, func() error {
		return metricAtLeast(ctx, ns, feMetrics, `nodedns_setup_errors_total{op="link"}`, 1)
	})
	if out, err := node.Run(ctx, "ip", "link", "del", "nodedns"); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	waitFor(t, time.Minute, "frontend ready", fp, ready(frontendReady))

	// Traffic, to the kube-dns ClusterIP the frontend owns.
	server := net.JoinHostPort(testbed.DNSServiceIP, "53")
	ask := func(name string, qtype uint16, rcode int) {
		t.Helper()
		in, err := query(ctx, ns, server, name, qtype)
		if err != nil {
			t.Fatal(err)
		}
		if in.Rcode != rcode {
			t.Fatalf("%s %s: %s, want %s", name, dns.TypeToString[qtype], dns.RcodeToString[in.Rcode], dns.RcodeToString[rcode])
		}
	}
	for i := 0; i < 3; i++ { // a miss, then hits
		ask("kubernetes.default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess)
		ask(externalName, dns.TypeA, dns.RcodeSuccess)
		ask("nonexistent.default.svc.cluster.local", dns.TypeA, dns.RcodeNameError)
		ask(brokenName, dns.TypeA, dns.RcodeServerFailure)
	}

	// Fallback use: the backend stops, its probes mark it down, and a new
	// name is resolved by the peer.
	bp.Stop()
	waitFor(t, time.Minute, "frontend sees the backend down", nil, func() error {
		return metricAtMost(ctx, ns, feMetrics, `nodedns_upstream_healthy{upstream="backend"`, 0)
	})
	ask("kube-dns.kube-system.svc.cluster.local", dns.TypeAAAA, dns.RcodeNameError)
	if err := metricAtLeast(ctx, ns, feMetrics, "nodedns_upstream_fallback_total", 1); err != nil {
		t.Fatalf("after a miss with the backend down: %v", err)
	}
	bp = backend.start(t, ns, "backend (restarted)")
	waitFor(t, 2*time.Minute, "backend ready again", bp, ready(backendReady))
	waitFor(t, time.Minute, "frontend sees the backend ready", fp, func() error {
		return metricAtLeast(ctx, ns, feMetrics, "nodedns_backend_ready", 1)
	})
	ask("kubernetes.default.svc.cluster.local", dns.TypeAAAA, dns.RcodeSuccess)

	t.Run("promtool check metrics", func(t *testing.T) {
		for _, u := range []string{feMetrics, beMetrics} {
			_, body, err := get(ctx, ns, u)
			if err != nil {
				t.Fatal(err)
			}
			findings, err := checkMetrics(body)
			if err != nil {
				t.Errorf("%s: %v", u, err)
				continue
			}
			// Every finding fails, the go_* and process_* series included.
			for _, f := range findings {
				t.Errorf("%s: promtool check metrics: %s", u, f)
			}
		}
	})

	waitFor(t, time.Minute, "both targets up", prom.proc, func() error {
		ts, err := prom.targets(ctx)
		if err != nil {
			return err
		}
		up := map[string]bool{}
		for _, tg := range ts {
			if tg.Health != "up" {
				return fmt.Errorf("%s %s: %s %s", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError)
			}
			up[tg.Labels["endpoint"]] = tg.Labels["node"] == node.Name && tg.Labels["job"] == svc.Name && tg.Labels["namespace"] == svc.Namespace
		}
		if !up["metrics-frontend"] || !up["metrics-backend"] {
			return fmt.Errorf("targets %+v: want metrics-frontend and metrics-backend up with node, job and namespace labels", ts)
		}
		return nil
	})

	// Steady traffic while the dashboard is read, so that its rates and
	// ratios have something to divide.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		names := []string{"kubernetes.default.svc.cluster.local", externalName, "nonexistent.default.svc.cluster.local"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = query(ctx, ns, server, names[i%len(names)], dns.TypeA)
		}
	}()
	time.Sleep(rateInterval / 2) // several scrapes of it
	t.Run("dashboard", func(t *testing.T) {
		checkDashboard(t, ctx, prom, dashboard, node.Name)
	})
	close(stop)
	<-done
	t.Run("alert rules", func(t *testing.T) {
		checkRules(t, ctx, prom)
	})
}

// probeURL is the URL kubelet would probe.
func probeURL(p *corev1.Probe) string {
	host := p.HTTPGet.Host
	if host == "" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("http://%s:%s%s", host, p.HTTPGet.Port.String(), p.HTTPGet.Path)
}

// writeRules writes the spec of the rendered PrometheusRule as a rule file.
func writeRules(t *testing.T, objs []helm.Object, dir string) string {
	t.Helper()
	for _, o := range objs {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && o.GVK.Kind == "PrometheusRule" {
			raw, err := yaml.Marshal(u.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "rules.yaml")
			if err := os.WriteFile(file, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			return file
		}
	}
	t.Fatalf("no PrometheusRule rendered: %s", helm.Kinds(objs))
	return ""
}

// checkDashboard evaluates every query of the dashboard through the HTTP
// API, waiting for rates to have two samples, and fails naming each panel
// whose query returns no series for node.
func checkDashboard(t *testing.T, ctx context.Context, prom *prometheus, dashboard, node string) {
	queries, variables, err := dashboardQueries([]byte(dashboard))
	if err != nil {
		t.Fatal(err)
	}
	pending := map[int]string{}
	for i := range queries {
		pending[i] = "not evaluated"
	}
	deadline := time.Now().Add(rateInterval + 40*time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for i := range pending {
			q := queries[i]
			res, err := prom.query(ctx, expandQuery(q.Expr, rateInterval))
			switch {
			case err != nil:
				pending[i] = err.Error()
			case len(res) == 0:
				pending[i] = "no series"
			case res[0].Metric["node"] != node:
				pending[i] = fmt.Sprintf("a series without node=%q: %v", node, res[0].Metric)
			case res[0].Value[1] == "NaN":
				pending[i] = "NaN (nothing to divide, or no samples in the rate's window)"
			default:
				delete(pending, i)
				t.Logf("panel %q %s: %v = %v", q.Panel, q.RefID, res[0].Metric, res[0].Value[1])
			}
		}
		time.Sleep(time.Second)
	}
	for i, why := range pending {
		t.Errorf("panel %q, query %s: %s: %s", queries[i].Panel, queries[i].RefID, why, queries[i].Expr)
	}
	// A label_values(METRIC, LABEL) variable lists the node.
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]+)\)$`)
	for _, v := range variables {
		m := labelValues.FindStringSubmatch(v.Expr)
		if m == nil {
			t.Errorf("%s: query %q is not label_values(METRIC, LABEL)", v.Panel, v.Expr)
			continue
		}
		var values []string
		if err := prom.api(ctx, "/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {m[1]}}, &values); err != nil {
			t.Errorf("%s: %v", v.Panel, err)
			continue
		}
		if len(values) != 1 || values[0] != node {
			t.Errorf("%s lists %q, want [%s]", v.Panel, values, node)
		}
	}
}

// selector matches the vector selectors of a PromQL expression.
var selector = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\{[^{}]*\}`)

// checkRules checks that Prometheus loaded every rule, evaluated it
// without error, and that each series selector of each rule matches
// series of the node: an alert selecting nothing would never fire.
func checkRules(t *testing.T, ctx context.Context, prom *prometheus) {
	var rules []rule
	waitFor(t, 30*time.Second, "rules evaluated", prom.proc, func() error {
		var err error
		if rules, err = prom.rules(ctx); err != nil {
			return err
		}
		if len(rules) == 0 {
			return fmt.Errorf("no rules loaded")
		}
		for _, r := range rules {
			if r.Health != "ok" {
				return fmt.Errorf("%s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
		return nil
	})
	for _, r := range rules {
		for _, sel := range selector.FindAllString(r.Query, -1) {
			res, err := prom.query(ctx, sel)
			if err != nil {
				t.Errorf("%s: %s: %v", r.Name, sel, err)
			} else if len(res) == 0 {
				t.Errorf("%s: %s selects no series", r.Name, sel)
			}
		}
		t.Logf("%s: %s", r.Name, r.State)
	}
}

// metricSum fetches url from inside netns and sums the samples of the
// series whose line starts with prefix (a name, or a name and the start of
// its labels).
func metricSum(ctx context.Context, netns, url, prefix string) (float64, int, error) {
	_, body, err := get(ctx, netns, url)
	if err != nil {
		return 0, 0, err
	}
	sum, n := 0.0, 0
	for _, line := range strings.Split(body, "\n") {
		name, _, _ := strings.Cut(strings.SplitN(line, " ", 2)[0], "{")
		if strings.Contains(prefix, "{") && !strings.HasPrefix(line, prefix) || !strings.Contains(prefix, "{") && name != prefix {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum += v
		n++
	}
	return sum, n, nil
}

func metricAtLeast(ctx context.Context, netns, url, prefix string, min float64) error {
	v, n, err := metricSum(ctx, netns, url, prefix)
	if err == nil && (n == 0 || v < min) {
		err = fmt.Errorf("%s: %s = %v over %d series, want at least %v", url, prefix, v, n, min)
	}
	return err
}

func metricAtMost(ctx context.Context, netns, url, prefix string, max float64) error {
	v, n, err := metricSum(ctx, netns, url, prefix)
	if err == nil && (n == 0 || v > max) {
		err = fmt.Errorf("%s: %s = %v over %d series, want at most %v", url, prefix, v, n, max)
	}
	return err
}
