package helm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// renderCases are the values files every rendering test runs: each mode,
// and the representative non-default values.
var renderCases = []struct {
	name   string
	values string
}{
	{"defaults", ``},
	{"mode iptables", `mode: iptables`},
	{"mode link-local", `mode: link-local`},
	{"mode node-ip", `mode: node-ip`},
	{"dual-stack link-local", "mode: link-local\nlocalIP: 169.254.20.10,fd00::10"},
	{"IPv6 iptables", "localIP: fd00::10\nservice: {clusterIP: fd00:10:96::a}\nfallback: {clusterIP: fd00:10:96::b}"},
	{"fallback port given", "backend: {fallbackPort: 5301}"},
	{"no handoff", `coreDNS: {deployment: ""}`},
	{"no native sidecar", `backend: {nativeSidecar: false}`},
	{"no fallback", `fallback: {enabled: false}`},
	{"no holder", `holder: {enabled: false}`},
	{"no kube-dns Service", `service: {create: false}`},
	{"stub domains", "stubDomains:\n  consul.local: [10.150.0.1, 10.150.0.2]\n  corp.example: [192.0.2.53]"},
	{"monitoring", "prometheus:\n  monitor: {enabled: true, namespace: monitoring, interval: 15s, additionalLabels: {release: prom}}\ndashboards: {enabled: true}"},
	{"no rbac, existing service account", "rbac: {create: false}\nserviceAccount: {create: false, name: dns}"},
	{"not a cluster service", "isClusterService: false\nk8sAppLabelOverride: \"\"\nservice: {name: \"\", clusterIP: 10.96.0.20}"},
	{"customised", `
nameOverride: dns
customLabels: {team: platform}
podAnnotations: {example.com/owner: platform}
nodeSelector: {node-role.kubernetes.io/worker: ""}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{key: type, operator: NotIn, values: [virtual-kubelet]}]
extraVolumes: [{name: zones, configMap: {name: dns-zones}}]
extraVolumeMounts: [{name: zones, mountPath: /etc/nodedns/zones}]
image: {tag: v9.9.9, pullSecrets: [regcred]}
cache: {size: 1000000, serveStale: 0s}
resources:
  frontend: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 256Mi}}
frontend: {extraArgs: [--log-level=debug]}
backend: {extraArgs: [-quiet]}
updateStrategy: {rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
`},
}

func render(t *testing.T, values string) (*Rendering, []Object, map[string]any) {
	t.Helper()
	return renderKube(t, values, "")
}

// renderKube is render for the cluster version kube ("": the default).
func renderKube(t *testing.T, values, kube string) (*Rendering, []Object, map[string]any) {
	t.Helper()
	vals, err := ParseValues(values)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(vals, Options{KubeVersion: kube, lookup: newEmptyCluster()})
	if err != nil {
		t.Fatalf("render %q: %v", values, err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	return r, objs, vals
}

func TestRender(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			r, objs, vals := render(t, tc.values)
			ds, err := DaemonSet(objs)
			if err != nil {
				t.Fatalf("%v in %s", err, Kinds(objs))
			}
			checkPod(t, ds, vals)
			checkServices(t, objs, ds, vals)
			// nodedns_acl's nodes needs the Nodes (fallback_acl_test.go).
			nodes := aclNodes.MatchString(ConfigMaps(objs)["nodedns-backend"].Data["Corefile"])
			checkRBAC(t, objs, ds, nodes)
			checkConfigMaps(t, objs, ds, vals)
			checkMonitoring(t, objs, vals)
			checkProbeAddress(t, objs)
			if !strings.Contains(r.Notes, "nodedns-frontend diagnose") {
				t.Errorf("NOTES.txt has no diagnose command:\n%s", r.Notes)
			}
			for _, o := range objs {
				if ns := o.Obj.(interface{ GetNamespace() string }).GetNamespace(); ns != "" && ns != DefaultNamespace && o.GVK.Kind != "ServiceMonitor" {
					t.Errorf("%s in namespace %q, want the release's", o.Source, ns)
				}
			}
		})
	}
}

// aclNodes matches a Corefile's nodedns_acl line with the word nodes.
var aclNodes = regexp.MustCompile(`nodedns_acl [^\n]*\bnodes\b`)

func get(vals map[string]any, path ...string) any {
	var cur any = vals
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func containers(ds *appsv1.DaemonSet) (frontend, backend *corev1.Container, sidecar bool) {
	spec := &ds.Spec.Template.Spec
	for i := range spec.Containers {
		switch spec.Containers[i].Name {
		case "frontend":
			frontend = &spec.Containers[i]
		case "backend":
			backend = &spec.Containers[i]
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == "backend" {
			backend, sidecar = &spec.InitContainers[i], true
		}
	}
	return frontend, backend, sidecar
}

func checkPod(t *testing.T, ds *appsv1.DaemonSet, vals map[string]any) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSDefault {
		t.Errorf("hostNetwork %v dnsPolicy %q, want true and Default", pod.HostNetwork, pod.DNSPolicy)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		t.Errorf("no toleration of every taint: %+v", pod.Tolerations)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("enableServiceLinks is not false: Services named nodedns-* would set NODEDNS_* variables")
	}
	if get(vals, "updateStrategy") == nil {
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
			ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
			t.Errorf("update strategy %+v, want RollingUpdate maxSurge 1 maxUnavailable 0", ds.Spec.UpdateStrategy)
		}
	}
	// The selector must select the template, and must not be satisfiable by
	// kubeadm's CoreDNS pods (k8s-app=kube-dns only).
	sel := labels.SelectorFromSet(ds.Spec.Selector.MatchLabels)
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v", sel, ds.Spec.Template.Labels)
	}
	if sel.Matches(labels.Set{"k8s-app": "kube-dns"}) {
		t.Errorf("selector %v matches kubeadm's CoreDNS pods", sel)
	}
	// kubeadm's kube-dns Service (selector k8s-app=kube-dns, target ports
	// 53 and 9153) must select the pods, which serve both ports: the
	// install needs no change of it.
	wantKubeDNS := get(vals, "isClusterService") != false && get(vals, "k8sAppLabelOverride") != ""
	if got := labels.SelectorFromSet(labels.Set{"k8s-app": "kube-dns"}).Matches(labels.Set(ds.Spec.Template.Labels)); got != wantKubeDNS {
		t.Errorf("pod labels %v: kubeadm's kube-dns Service selects them: %v, want %v", ds.Spec.Template.Labels, got, wantKubeDNS)
	}
	if got := ds.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"]; got != "frontend" {
		t.Errorf("default container %q, want frontend (kubectl logs -l k8s-app=kube-dns)", got)
	}

	hostPath := map[string]corev1.HostPathVolumeSource{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPath[v.Name] = *v.HostPath
		}
	}
	want := map[string]corev1.HostPathType{"/run/xtables.lock": corev1.HostPathFileOrCreate, "/run/nodedns": corev1.HostPathDirectoryOrCreate}
	for _, hp := range hostPath {
		if typ, ok := want[hp.Path]; ok && hp.Type != nil && *hp.Type == typ {
			delete(want, hp.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("host path volumes %v lack %v", hostPath, want)
	}

	fe, be, sidecar := containers(ds)
	if fe == nil || be == nil {
		t.Fatalf("frontend %v backend %v", fe != nil, be != nil)
	}
	if wantSidecar := get(vals, "backend", "nativeSidecar") != false && get(vals, "backend", "nativeSidecar") != "false"; sidecar != wantSidecar {
		t.Errorf("backend native sidecar %v, want %v", sidecar, wantSidecar)
	}
	if sidecar {
		if be.RestartPolicy == nil || *be.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("backend init container without restartPolicy Always")
		}
		checkProbe(t, "backend startup", be.StartupProbe, "/ready", 8181)
	}
	checkProbe(t, "backend liveness", be.LivenessProbe, "/health", 9155)
	checkProbe(t, "backend readiness", be.ReadinessProbe, "/ready", 8181)
	checkProbe(t, "frontend liveness", fe.LivenessProbe, "/health", 9254)
	checkProbe(t, "frontend readiness", fe.ReadinessProbe, "/ready", 9254)

	for _, c := range []*corev1.Container{fe, be} {
		// Declared ports of a hostNetwork pod are host ports: a surge pod
		// would not be scheduled next to the old one.
		if len(c.Ports) > 0 {
			t.Errorf("%s declares ports %v", c.Name, c.Ports)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
				e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name
		}) {
			t.Errorf("%s: no GOMEMLIMIT from its own limits.memory", c.Name)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("%s: no memory limit (GOMEMLIMIT would be the node's memory)", c.Name)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			t.Errorf("%s: a CPU limit throttles DNS", c.Name)
		}
	}

	bsc := be.SecurityContext
	if bsc == nil || bsc.RunAsNonRoot == nil || !*bsc.RunAsNonRoot || bsc.ReadOnlyRootFilesystem == nil || !*bsc.ReadOnlyRootFilesystem ||
		bsc.AllowPrivilegeEscalation == nil || *bsc.AllowPrivilegeEscalation || bsc.Capabilities == nil ||
		!slices.Equal(bsc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(bsc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) {
		t.Errorf("backend security context %+v: want non-root, read-only root, drop ALL, add NET_BIND_SERVICE (port 53)", bsc)
	}
	if got, want := containerEnv(be, "NODEDNS_FALLBACK_PORT"), fmt.Sprint(fallbackPort(vals)); got != want {
		t.Errorf("backend NODEDNS_FALLBACK_PORT %q, want %s", got, want)
	}
	fsc := fe.SecurityContext
	if fsc == nil || fsc.Privileged == nil || *fsc.Privileged || fsc.Capabilities == nil ||
		!slices.Equal(fsc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("frontend security context %+v: want unprivileged, drop ALL", fsc)
	}
	for _, c := range []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"} {
		if !slices.Contains(fsc.Capabilities.Add, c) {
			t.Errorf("frontend lacks %s: %v", c, fsc.Capabilities.Add)
		}
	}
	if !slices.ContainsFunc(fe.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/xtables.lock" }) ||
		!slices.ContainsFunc(fe.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/nodedns" }) {
		t.Errorf("frontend mounts %v lack the xtables lock or the handover directory", fe.VolumeMounts)
	}
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path string, port int) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe: none", what)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromInt32(int32(port)) {
		t.Errorf("%s probe: %s %s, want %s %d", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
	if p.HTTPGet.Port.IntValue() == 8080 {
		t.Errorf("%s probe on 8080", what)
	}
}

func checkServices(t *testing.T, objs []Object, ds *appsv1.DaemonSet, vals map[string]any) {
	t.Helper()
	podLabels := labels.Set(ds.Spec.Template.Labels)
	var dns, fallback *corev1.Service
	for _, o := range objs {
		svc, ok := o.Obj.(*corev1.Service)
		if !ok {
			continue
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the pods", svc.Name, svc.Spec.Selector)
		}
		if _, ok := svc.Spec.Selector["k8s-app"]; ok {
			t.Errorf("Service %s selects on k8s-app, which kubeadm's CoreDNS pods carry too", svc.Name)
		}
		switch {
		case strings.HasSuffix(o.Source, "/service.yaml"):
			dns = svc
		case strings.HasSuffix(o.Source, "/service-fallback.yaml"):
			fallback = svc
		case strings.HasSuffix(o.Source, "/service-metrics.yaml"):
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("metrics Service is not headless")
			}
		}
	}
	port := fallbackPort(vals)
	if dns == nil {
		if get(vals, "service", "create") != false {
			t.Fatal("no kube-dns Service")
		}
		dns = &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}}
	} else {
		// kubeadm's ports, so kube-prometheus's ServiceMonitor (port
		// metrics) finds the backends.
		var ports []string
		for _, p := range dns.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%s %s %d->%s", p.Name, p.Protocol, p.Port, p.TargetPort.String()))
		}
		want := []string{fmt.Sprintf("dns UDP 53->%d", port), fmt.Sprintf("dns-tcp TCP 53->%d", port), "metrics TCP 9153->9153"}
		if !slices.Equal(ports, want) {
			t.Errorf("kube-dns ports %q, want %q", ports, want)
		}
	}
	fe, _, _ := containers(ds)
	hasFallbackFlag := slices.ContainsFunc(fe.Args, func(a string) bool { return strings.HasPrefix(a, "--fallback=") })
	if fallback == nil {
		if hasFallbackFlag {
			t.Errorf("--fallback without a fallback Service")
		}
		return
	}
	if !hasFallbackFlag {
		t.Errorf("a fallback Service but no --fallback")
	}
	if fallback.Spec.ClusterIP == "" || fallback.Spec.ClusterIP == dns.Spec.ClusterIP {
		t.Errorf("fallback ClusterIP %q: must be set and differ from kube-dns's %q", fallback.Spec.ClusterIP, dns.Spec.ClusterIP)
	}
	if len(fallback.Spec.Ports) != 1 || fallback.Spec.Ports[0].Protocol != corev1.ProtocolTCP || fallback.Spec.Ports[0].TargetPort != intstr.FromInt32(int32(port)) {
		t.Errorf("fallback ports %+v, want TCP -> %d", fallback.Spec.Ports, port)
	}
}

func checkRBAC(t *testing.T, objs []Object, ds *appsv1.DaemonSet, nodes bool) {
	t.Helper()
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for _, o := range objs {
		// The handoff hooks' (handoff_test.go) are not the pods'.
		if strings.HasSuffix(o.Source, "handoff-rbac.yaml") {
			continue
		}
		switch v := o.Obj.(type) {
		case *rbacv1.ClusterRole:
			role = v
		case *rbacv1.ClusterRoleBinding:
			binding = v
		}
	}
	if role == nil {
		return // rbac.create false
	}
	got := map[string][]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = r.Verbs
			}
		}
	}
	want := map[string][]string{"/services": {"list", "watch"}, "/namespaces": {"list", "watch"}, "discovery.k8s.io/endpointslices": {"list", "watch"}}
	if nodes {
		want["/nodes"] = []string{"list", "watch"} // nodedns_acl's nodes (fallback_acl_test.go)
	}
	if len(got) != len(want) {
		t.Errorf("ClusterRole grants %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("ClusterRole grants %s %v, want %v", k, got[k], v)
		}
	}
	if binding == nil || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != ds.Spec.Template.Spec.ServiceAccountName || binding.Subjects[0].Namespace != ds.Namespace {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to the pods' ServiceAccount", binding, role.Name)
	}
}

func checkConfigMaps(t *testing.T, objs []Object, ds *appsv1.DaemonSet, vals map[string]any) {
	t.Helper()
	cms := ConfigMaps(objs)
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && cms[v.ConfigMap.Name] == nil && v.Name == "backend-config" {
			t.Errorf("volume %s: ConfigMap %s not rendered", v.Name, v.ConfigMap.Name)
		}
	}
	containers, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range containers {
		for _, a := range append(append([]string{}, c.Command...), c.Env...) {
			if strings.Contains(a, "$(") {
				t.Errorf("%s: unexpanded reference in %q", c.Spec.Name, a)
			}
		}
	}
}

func checkMonitoring(t *testing.T, objs []Object, vals map[string]any) {
	t.Helper()
	var sm *unstructured.Unstructured
	var dashboard *corev1.ConfigMap
	for _, o := range objs {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && o.GVK.Kind == "ServiceMonitor" {
			sm = u
		}
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok && cm.Labels["grafana_dashboard"] == "1" {
			dashboard = cm
		}
	}
	if want := get(vals, "prometheus", "monitor", "enabled") == true; want != (sm != nil) {
		t.Errorf("ServiceMonitor rendered %v, want %v", sm != nil, want)
	}
	if sm != nil && sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s", sm.GetAPIVersion())
	}
	if want := get(vals, "dashboards", "enabled") == true; want != (dashboard != nil) {
		t.Errorf("dashboard ConfigMap rendered %v, want %v", dashboard != nil, want)
	}
	if dashboard != nil && !strings.Contains(dashboard.Data["nodedns.json"], "coredns_dns_requests_total") {
		t.Errorf("dashboard ConfigMap does not hold the dashboard")
	}
}

// TestFrontendArgs checks the frontend's command line, as kubelet expands
// it, in each mode.
func TestFrontendArgs(t *testing.T) {
	node := Node{Name: "node-a", IP: "192.0.2.7"}
	for _, tc := range []struct {
		values   string
		want     []string
		unwanted []string
	}{
		{``, []string{"--mode=iptables", "--listen=169.254.20.10:53,10.96.0.10:53", "--local-ip=169.254.20.10",
			"--service-ip=10.96.0.10", "--fallback=10.96.0.11:53", "--backend=127.0.0.1:5300",
			"--metrics=192.0.2.7:9253"}, nil}, // --health and --backend-ready-url: TestProbeAddress
		{`mode: link-local`, []string{"--mode=link-local", "--listen=169.254.20.10:53", "--local-ip=169.254.20.10"}, []string{"--service-ip"}},
		// node-ip mode owns the ClusterIP too: pods naming it are never
		// DNATed to the node IP (docs/modes.md).
		{`mode: node-ip`, []string{"--mode=node-ip", "--listen=192.0.2.7:53,10.96.0.10:53", "--local-ip=192.0.2.7",
			"--service-ip=10.96.0.10", "--interface=nodedns", "--release-to=10.96.0.10", "--fallback=10.96.0.11:5301"}, nil},
		{"mode: node-ip\nservice: {clusterIP: fd00:10:96::a}\nfallback: {clusterIP: fd00:10:96::b}", []string{"--listen=192.0.2.7:53,[fd00:10:96::a]:53", "--service-ip=fd00:10:96::a"}, nil},
		{"service: {clusterIP: 10.100.0.10}", []string{"--service-ip=10.100.0.10", "--fallback=10.100.0.11:53"}, nil},
		{"backend: {fallbackPort: 5353}", []string{"--fallback=10.96.0.11:5353"}, nil},
		{"localIP: fd00::10\nservice: {clusterIP: fd00:10:96::a}\nfallback: {clusterIP: fd00:10:96::b}", []string{"--listen=[fd00::10]:53,[fd00:10:96::a]:53", "--service-ip=fd00:10:96::a", "--fallback=[fd00:10:96::b]:53"}, nil},
		{`fallback: {enabled: false}`, nil, []string{"--fallback"}},
	} {
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NodeContainers(vals, onEmptyCluster(), node)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 3 || cs[0].Spec.Name != "backend" || !cs[0].Sidecar || cs[1].Spec.Name != "frontend" || cs[2].Spec.Name != "holder" {
			t.Fatalf("containers in start order: want backend (sidecar), frontend, holder")
		}
		fe := cs[1].Command
		if fe[0] != "nodedns-frontend" {
			t.Errorf("frontend command %q", fe[0])
		}
		for _, w := range tc.want {
			if !slices.Contains(fe, w) {
				t.Errorf("%q: frontend command %q lacks %q", tc.values, fe, w)
			}
		}
		for _, u := range tc.unwanted {
			if slices.ContainsFunc(fe, func(a string) bool { return strings.HasPrefix(a, u) }) {
				t.Errorf("%q: frontend command %q has %s", tc.values, fe, u)
			}
		}
		if !slices.Contains(cs[1].Env, "GOMEMLIMIT=67108864") || !slices.Contains(cs[0].Env, "GOMEMLIMIT=268435456") {
			t.Errorf("GOMEMLIMIT not the byte count of the limits: %q %q", cs[1].Env, cs[0].Env)
		}
		// backend/memstudy_test.go's memChartProcs measures the backend
		// with this GOMAXPROCS.
		if !slices.Contains(cs[0].Env, "GOMAXPROCS=2") || slices.ContainsFunc(cs[1].Env, func(e string) bool { return strings.HasPrefix(e, "GOMAXPROCS=") }) {
			t.Errorf("want GOMAXPROCS=2 in the backend's environment only: %q %q", cs[0].Env, cs[1].Env)
		}
	}
}

// TestRenderRejects checks that values the frontend cannot work with fail
// at render time, not on the nodes.
func TestRenderRejects(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{`mode: ipvs`, "mode"},
		// The fallback address is derived for IPv4 only.
		{`service: {clusterIP: "fd00:10:96::a"}`, "fallback.clusterIP is empty and cannot be derived"},
		{`service: {clusterIP: 10.96.0.255}`, "fallback.clusterIP is empty and cannot be derived"},
		{"mode: node-ip\nbackend: {fallbackPort: 53}", "backend.fallbackPort 53 in node-ip mode"},
	} {
		vals, err := ParseValues(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Render(vals, onEmptyCluster()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.values, err, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)":          "1",
		"x$(B)y$(A)":    "xtwoy1",
		"$$(A)":         "$(A)",
		"$(C)":          "$(C)",
		"$(A":           "$(A",
		"$":             "$",
		"--n=$(A),$(B)": "--n=1,two",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNativeSidecarAuto checks backend.nativeSidecar=auto against the
// cluster version: an API server before 1.29 would drop restartPolicy and
// leave the backend a blocking init container.
func TestNativeSidecarAuto(t *testing.T) {
	for _, tc := range []struct {
		kube, values string
		want         bool
	}{
		{"v1.36.0", "", true},
		{"v1.29.0", "", true},
		{"v1.28.5", "", false},
		{"v1.28.5", "backend: {nativeSidecar: true}", true},
		{"v1.36.0", "backend: {nativeSidecar: false}", false},
	} {
		_, objs, _ := renderKube(t, tc.values, tc.kube)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		fe, be, sidecar := containers(ds)
		if fe == nil || be == nil || sidecar != tc.want {
			t.Errorf("Kubernetes %s, %q: backend sidecar %v, want %v", tc.kube, tc.values, sidecar, tc.want)
		}
		if !sidecar && (be.StartupProbe != nil || be.LivenessProbe.InitialDelaySeconds == 0) {
			t.Errorf("Kubernetes %s, %q: a plain backend container with a startup probe or no initial delay", tc.kube, tc.values)
		}
	}
}

// fallbackPort is the port of the backend's fallback listener that vals
// ask for: backend.fallbackPort, or by default 53 (5301 in node-ip mode).
func fallbackPort(vals map[string]any) int {
	switch p := get(vals, "backend", "fallbackPort").(type) {
	case int:
		return p
	case float64:
		return int(p)
	}
	if get(vals, "mode") == "node-ip" {
		return 5301
	}
	return 53
}

func containerEnv(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
