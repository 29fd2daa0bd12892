package helm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSchemaRejects: values.schema.json fails wrong types and unknown keys
// with a message naming the key, and the coredns chart's keys that mean
// something else here fail with what to use instead (templates/_compat.tpl).
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		// Types and unknown keys: Helm's schema validation.
		{`mode: 5`, "at '/mode'"},
		{`maxInflight: lots`, "at '/maxInflight'"},
		{`cache: {size: "big"}`, "at '/cache/size': got string, want integer"},
		{`holder: {enabled: "yes"}`, "at '/holder/enabled'"},
		{`tolerations: {operator: Exists}`, "at '/tolerations'"},
		{`servers: [{port: 5300, plugins: [{parameters: x}]}]`, "name"},
		{`image: {pullSecrets: [{name: regcred}]}`, "at '/image/pullSecrets/0': got object, want string"},
		{`replicas: 3`, "additional properties 'replicas' not allowed"},
		{`frontend: {metricPort: 1}`, "at '/frontend': additional properties 'metricPort' not allowed"},
		{`backend: {fallbackPort: fifty}`, "at '/backend/fallbackPort'"},
		// coredns/helm keys: the chart's own message.
		{`image: {repository: coredns/coredns}`, "set image.frontend.repository and image.backend.repository"},
		{`resources: {limits: {memory: 170Mi}}`, "set resources.backend.limits (CoreDNS) and resources.frontend.limits"},
		{`resources: {requests: {cpu: 100m}}`, "resources.backend.requests"},
		{`replicaCount: 2`, "one pod per node"},
		{`rollingUpdate: {maxSurge: 1}`, "updateStrategy.rollingUpdate"},
		{`serviceType: LoadBalancer`, "remove serviceType"},
		{`podDisruptionBudget: {maxUnavailable: 1}`, "remove podDisruptionBudget"},
		{`securityContext: {runAsUser: 0}`, "frontend.capabilities"},
		{`env: [{name: A, value: b}]`, "frontend.env"},
		{`deployment: {enabled: true}`, "coreDNS.deployment"},
		{`zoneFiles: []`, "extraVolumes"},
		{"servers:\n- zones: [{zone: .}]\n  port: 53\n  plugins: [{name: errors}]", `servers[0].port is 53`},
	} {
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Render(vals, onEmptyCluster())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.values, err, tc.want)
		}
	}
}

// TestCoreDNSChartKeys: the coredns chart's keys that mean the same here
// land where its users expect them.
func TestCoreDNSChartKeys(t *testing.T) {
	_, objs, _ := render(t, `
priorityClassName: system-cluster-critical
tolerations: [{key: CriticalAddonsOnly, operator: Exists}]
nodeSelector: {pool: system}
podAnnotations: {a: b}
customLabels: {team: dns}
isClusterService: true
k8sAppLabelOverride: kube-dns
terminationGracePeriodSeconds: 40
service: {name: kube-dns, clusterIP: 10.96.0.10, annotations: {prometheus.io/scrape: "true"}}
serviceAccount: {create: true, name: dns}
rbac: {create: true}
prometheus: {service: {enabled: true}, monitor: {enabled: true}}
servers:
- zones: [{zone: .}]
  port: "{$NODEDNS_PORT}"
  plugins:
  - {name: bind, parameters: "{$NODEDNS_BIND}"}
  - {name: errors}
  - {name: health, parameters: "{$NODEDNS_HEALTH}"}
  - {name: ready, parameters: "{$NODEDNS_READY}"}
  - {name: kubernetes, parameters: cluster.local in-addr.arpa ip6.arpa, configBlock: "pods insecure\nfallthrough in-addr.arpa ip6.arpa\nttl 30"}
  - {name: prometheus, parameters: "{$NODEDNS_METRICS}"}
  - {name: forward, parameters: ". /etc/resolv.conf"}
  - {name: cache, parameters: 30}
`)
	ds, err := DaemonSet(objs)
	if err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template
	if pod.Spec.PriorityClassName != "system-cluster-critical" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "CriticalAddonsOnly" ||
		pod.Spec.NodeSelector["pool"] != "system" || pod.Annotations["a"] != "b" || pod.Labels["team"] != "dns" ||
		pod.Labels["k8s-app"] != "kube-dns" || *pod.Spec.TerminationGracePeriodSeconds != 40 || pod.Spec.ServiceAccountName != "dns" {
		t.Errorf("pod template does not carry the values: %+v", pod)
	}
	svc, _ := Find(objs, "Service", "kube-dns").(*corev1.Service)
	if svc == nil || svc.Spec.ClusterIP != "10.96.0.10" || svc.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("kube-dns Service %+v", svc)
	}
	cm := ConfigMaps(objs)["nodedns-backend"]
	if cm == nil || !strings.Contains(cm.Data["Corefile"], "kubernetes cluster.local in-addr.arpa ip6.arpa {") || !strings.Contains(cm.Data["Corefile"], "cache 30") {
		t.Errorf("Corefile from servers: %v", cm)
	}
	if Find(objs, "ServiceMonitor", "nodedns") == nil {
		t.Errorf("no ServiceMonitor with prometheus.monitor.enabled: %s", Kinds(objs))
	}
}
