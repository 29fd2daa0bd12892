package monitoring

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodedns/nodedns/helm"
)

// pod is what Kubernetes service discovery would know of the one nodedns
// pod behind the metrics Service on a node.
type pod struct {
	Name, Node string
	IP         net.IP // hostNetwork: the node's IP
}

// relabeling is a ServiceMonitor endpoint's relabeling (the Prometheus
// Operator's RelabelConfig, in its camelCase fields).
type relabeling struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// toPrometheus is r as a relabel_config of Prometheus's configuration.
func (r relabeling) toPrometheus() map[string]any {
	m := map[string]any{}
	if len(r.SourceLabels) > 0 {
		m["source_labels"] = r.SourceLabels
	}
	if r.Separator != nil {
		m["separator"] = *r.Separator
	}
	if r.TargetLabel != "" {
		m["target_label"] = r.TargetLabel
	}
	if r.Regex != "" {
		m["regex"] = r.Regex
	}
	if r.Modulus != 0 {
		m["modulus"] = r.Modulus
	}
	if r.Replacement != nil {
		m["replacement"] = *r.Replacement
	}
	if r.Action != "" {
		m["action"] = strings.ToLower(r.Action)
	}
	return m
}

// scrapeConfigs translates a ServiceMonitor into the scrape_configs that
// the Prometheus Operator would generate for it, with a static target in
// place of Kubernetes service discovery: the discovery labels the
// Operator's relabelings read (__meta_kubernetes_*) are set on the target,
// then come the Operator's own relabelings (namespace, service, pod, job
// from the Service's name, endpoint from the port's name) and the
// endpoint's. Endpoint ports are resolved by name in svc, which the
// ServiceMonitor must select.
func scrapeConfigs(sm *unstructured.Unstructured, svc *corev1.Service, p pod) ([]map[string]any, error) {
	raw, err := json.Marshal(sm.Object["spec"])
	if err != nil {
		return nil, err
	}
	var spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string       `json:"port"`
			Path          string       `json:"path"`
			Interval      string       `json:"interval"`
			ScrapeTimeout string       `json:"scrapeTimeout"`
			Relabelings   []relabeling `json:"relabelings"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("ServiceMonitor %s spec: %w", sm.GetName(), err)
	}
	for k, v := range spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			return nil, fmt.Errorf("ServiceMonitor %s selects %s=%s; Service %s has %q", sm.GetName(), k, v, svc.Name, svc.Labels[k])
		}
	}
	if ns := spec.NamespaceSelector.MatchNames; len(ns) > 0 && !contains(ns, svc.Namespace) {
		return nil, fmt.Errorf("ServiceMonitor %s selects namespaces %q, not the Service's %s", sm.GetName(), ns, svc.Namespace)
	}
	var out []map[string]any
	for i, ep := range spec.Endpoints {
		var port int32
		for _, sp := range svc.Spec.Ports {
			if sp.Name == ep.Port {
				port = sp.TargetPort.IntVal
				if port == 0 {
					port = sp.Port
				}
			}
		}
		if port == 0 {
			return nil, fmt.Errorf("ServiceMonitor %s endpoint %d: Service %s has no port named %q", sm.GetName(), i, svc.Name, ep.Port)
		}
		relabel := []map[string]any{
			{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
			{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
			{"target_label": "endpoint", "replacement": ep.Port},
		}
		for _, r := range ep.Relabelings {
			relabel = append(relabel, r.toPrometheus())
		}
		path := ep.Path
		if path == "" {
			path = "/metrics"
		}
		sc := map[string]any{
			"job_name":     fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.GetNamespace(), sm.GetName(), i),
			"metrics_path": path,
			"honor_labels": false,
			"static_configs": []map[string]any{{
				"targets": []string{net.JoinHostPort(p.IP.String(), strconv.Itoa(int(port)))},
				"labels": map[string]string{
					"__meta_kubernetes_namespace":          svc.Namespace,
					"__meta_kubernetes_service_name":       svc.Name,
					"__meta_kubernetes_pod_name":           p.Name,
					"__meta_kubernetes_pod_node_name":      p.Node,
					"__meta_kubernetes_endpoint_port_name": ep.Port,
				},
			}},
			"relabel_configs": relabel,
		}
		if ep.Interval != "" {
			sc["scrape_interval"] = ep.Interval
		}
		if ep.ScrapeTimeout != "" {
			sc["scrape_timeout"] = ep.ScrapeTimeout
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ServiceMonitor %s has no endpoints", sm.GetName())
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// chartMonitoring renders the chart with values and returns its
// ServiceMonitor and the metrics Service it selects.
func chartMonitoring(values map[string]any) (*unstructured.Unstructured, *corev1.Service, error) {
	r, err := helm.Render(helm.WithoutCluster(values), helm.Options{})
	if err != nil {
		return nil, nil, err
	}
	objs, err := r.Objects()
	if err != nil {
		return nil, nil, err
	}
	var sm *unstructured.Unstructured
	var svc *corev1.Service
	for _, o := range objs {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && o.GVK.Kind == "ServiceMonitor" {
			sm = u
		}
		if s, ok := o.Obj.(*corev1.Service); ok && s.Labels["app.kubernetes.io/component"] == "metrics" {
			svc = s
		}
	}
	if sm == nil || svc == nil {
		return nil, nil, fmt.Errorf("ServiceMonitor rendered %v, metrics Service rendered %v: %s", sm != nil, svc != nil, helm.Kinds(objs))
	}
	return sm, svc, nil
}

// TestScrapeConfigs checks the translation of the chart's ServiceMonitor:
// one job per endpoint, at the port the Service names, with the chart's
// relabeling of the node.
func TestScrapeConfigs(t *testing.T) {
	sm, svc, err := chartMonitoring(map[string]any{"prometheus": map[string]any{"monitor": map[string]any{"enabled": true, "interval": "2s"}}})
	if err != nil {
		t.Fatal(err)
	}
	scs, err := scrapeConfigs(sm, svc, pod{Name: "nodedns-x", Node: "node-a", IP: net.ParseIP("192.0.2.7")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"192.0.2.7:9253": "metrics-frontend", "192.0.2.7:9153": "metrics-backend"}
	for _, sc := range scs {
		static := sc["static_configs"].([]map[string]any)[0]
		target := static["targets"].([]string)[0]
		port := static["labels"].(map[string]string)["__meta_kubernetes_endpoint_port_name"]
		if want[target] != port {
			t.Errorf("%s scrapes %s for port %s", sc["job_name"], target, port)
		}
		delete(want, target)
		if sc["scrape_interval"] != "2s" {
			t.Errorf("%s: scrape_interval %v, want the ServiceMonitor's 2s", sc["job_name"], sc["scrape_interval"])
		}
		node := false
		for _, r := range sc["relabel_configs"].([]map[string]any) {
			if r["target_label"] == "node" && fmt.Sprint(r["source_labels"]) == "[__meta_kubernetes_pod_node_name]" {
				node = true
			}
		}
		if !node {
			t.Errorf("%s: no relabeling of __meta_kubernetes_pod_node_name into node: %v", sc["job_name"], sc["relabel_configs"])
		}
	}
	if len(want) != 0 {
		t.Errorf("not scraped: %v", want)
	}
	other := svc.DeepCopy()
	other.Labels = map[string]string{"app": "other"}
	if _, err := scrapeConfigs(sm, other, pod{IP: net.ParseIP("192.0.2.7")}); err == nil {
		t.Error("a Service the ServiceMonitor does not select was scraped")
	}
}
