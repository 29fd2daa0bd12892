package helm

import (
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkProbeAddress checks that one rendering uses one probe address
// everywhere a probe endpoint is named: the host of every httpGet probe,
// the backend's NODEDNS_READY and NODEDNS_HEALTH (and so its Corefile's
// ready and health lines), and the frontend's --health and
// --backend-ready-url; that the address is loopback and outside
// 127.0.0.0/24. It returns the address ("" when probeAddress is "").
func checkProbeAddress(t *testing.T, objs []Object) string {
	t.Helper()
	ds, err := DaemonSet(objs)
	if err != nil {
		t.Fatal(err)
	}
	fe, be, sidecar := containers(ds)
	if fe == nil || be == nil {
		t.Fatalf("frontend %v backend %v", fe != nil, be != nil)
	}
	probes := map[string]*corev1.Probe{
		"frontend liveness": fe.LivenessProbe, "frontend readiness": fe.ReadinessProbe,
		"backend liveness": be.LivenessProbe, "backend readiness": be.ReadinessProbe,
	}
	if sidecar {
		probes["backend startup"] = be.StartupProbe
	}
	addr := fe.ReadinessProbe.HTTPGet.Host
	for what, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no httpGet probe", what)
			continue
		}
		if p.HTTPGet.Host != addr {
			t.Errorf("%s probe host %q, frontend readiness probe host %q: want one address", what, p.HTTPGet.Host, addr)
		}
	}
	if addr != "" {
		ip := net.ParseIP(addr).To4()
		if ip == nil || ip[0] != 127 || (ip[1] == 0 && ip[2] == 0) {
			t.Errorf("probe address %q: want an IPv4 loopback address outside 127.0.0.0/24", addr)
		}
	}
	hostPort := func(p *corev1.Probe) string { return net.JoinHostPort(addr, p.HTTPGet.Port.String()) }
	if addr == "" {
		hostPort = func(p *corev1.Probe) string { return ":" + p.HTTPGet.Port.String() }
	}

	env := map[string]string{}
	var envList []string
	for _, e := range be.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			envList = append(envList, e.Name+"="+e.Value)
		}
	}
	wantReady, wantHealth := hostPort(be.ReadinessProbe), hostPort(be.LivenessProbe)
	if env["NODEDNS_READY"] != wantReady || env["NODEDNS_HEALTH"] != wantHealth {
		t.Errorf("backend NODEDNS_READY %q NODEDNS_HEALTH %q, want %q %q (the probes' host and ports)",
			env["NODEDNS_READY"], env["NODEDNS_HEALTH"], wantReady, wantHealth)
	}
	// The Corefile must take both addresses from the environment: a
	// literal address would be the same for the old and the new pod (and
	// the reload plugin applies an edited Corefile to the old pod too).
	cms := ConfigMaps(objs)
	var corefile string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "backend-config" && v.ConfigMap != nil && cms[v.ConfigMap.Name] != nil {
			corefile = cms[v.ConfigMap.Name].Data["Corefile"]
		}
	}
	lines := corefileLines(loadCorefile(corefile, envList))
	if !slices.Contains(lines, "ready "+wantReady) || !slices.Contains(lines, "health "+wantHealth+" {") {
		t.Errorf("the Corefile as the backend loads it has no \"ready %s\" or \"health %s {\" line:\n%s", wantReady, wantHealth, strings.Join(lines, "\n"))
	}

	readyHost := addr
	if readyHost == "" {
		readyHost = "127.0.0.1" // the backend's ready listener binds every address
	}
	for _, want := range []string{
		"--health=" + hostPort(fe.LivenessProbe),
		"--backend-ready-url=http://" + net.JoinHostPort(readyHost, be.ReadinessProbe.HTTPGet.Port.String()) + "/ready",
	} {
		if !slices.Contains(fe.Args, want) {
			t.Errorf("frontend args %q lack %q", fe.Args, want)
		}
	}
	for _, from := range fe.EnvFrom {
		if cm := cms[from.ConfigMapRef.Name]; cm != nil && addr != "" {
			for k, v := range cm.Data {
				if strings.Contains(v, addr) {
					t.Errorf("ConfigMap %s, shared by the pods of every revision, holds the probe address: %s=%s", cm.Name, k, v)
				}
			}
		}
	}
	return addr
}

// renderProbeAddress renders values for the cluster version kube and
// returns the checked probe address and the DaemonSet's pod template.
func renderProbeAddress(t *testing.T, values, kube string) (string, corev1.PodTemplateSpec, []Object) {
	t.Helper()
	_, objs, _ := renderKube(t, values, kube)
	ds, err := DaemonSet(objs)
	if err != nil {
		t.Fatal(err)
	}
	return checkProbeAddress(t, objs), ds.Spec.Template, objs
}

// TestProbeAddress checks probeAddress "auto" across revisions: what
// changes the pod template changes the address, the same values give the
// same address, and values the pod template does not use change neither
// (so a Corefile edit is still applied in place by the reload plugin, not
// by a rollout).
func TestProbeAddress(t *testing.T) {
	base, baseTmpl, baseObjs := renderProbeAddress(t, "", "")
	if !strings.HasPrefix(base, "127.") || !strings.HasSuffix(base, ".1") {
		t.Fatalf("default probe address %q, want 127.X.Y.1", base)
	}
	if again, _, _ := renderProbeAddress(t, "probeAddress: auto", ""); again != base {
		t.Errorf("same values rendered twice: %s and %s", base, again)
	}
	for _, tc := range []struct{ name, values, kube string }{
		{"image tag", "image: {tag: v0.1.1}", ""},
		{"frontend flag through its ConfigMap", "cache: {size: 20000}", ""},
		{"frontend extra flag", "frontend: {extraArgs: [--log-level=debug]}", ""},
		{"backend memory limit", "resources: {backend: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 300Mi}}}", ""},
		{"backend not a native sidecar", "backend: {nativeSidecar: false}", ""},
		{"cluster before native sidecars (auto)", "", "v1.28.5"},
		{"pod annotation", "podAnnotations: {example.com/restart: \"2\"}", ""},
	} {
		addr, tmpl, _ := renderProbeAddress(t, tc.values, tc.kube)
		if reflect.DeepEqual(tmpl, baseTmpl) {
			t.Errorf("%s: the pod template did not change; the case checks nothing", tc.name)
		}
		if addr == base {
			t.Errorf("%s: probe address %s unchanged: old and new pods would share it", tc.name, addr)
		}
	}
	baseCorefile := ConfigMaps(baseObjs)["nodedns-backend"].Data["Corefile"]
	for _, tc := range []struct{ name, values, kube string }{
		{"stub domain (Corefile only)", "stubDomains: {consul.local: [10.150.0.1]}", ""},
		{"upstreams (Corefile only)", "upstreams: [10.0.0.2]", ""},
		{"ServiceMonitor", "prometheus: {monitor: {enabled: true}}", ""},
		{"cluster version, same layout", "", "v1.30.2"},
	} {
		addr, tmpl, objs := renderProbeAddress(t, tc.values, tc.kube)
		if !reflect.DeepEqual(tmpl, baseTmpl) {
			t.Errorf("%s: the pod template changed", tc.name)
		}
		if addr != base {
			t.Errorf("%s: probe address %s, want %s: the pod template is the same, so no rollout happens", tc.name, addr, base)
		}
		if strings.Contains(tc.name, "Corefile") && ConfigMaps(objs)["nodedns-backend"].Data["Corefile"] == baseCorefile {
			t.Errorf("%s: the Corefile did not change; the case checks nothing", tc.name)
		}
	}
}

// TestProbeAddressSpread renders many revisions (image tags) and checks
// that their addresses are 127.X.Y.1 with X in 1..254, spread out: at most
// one pair shares an address (about 0.03 pairs are expected among 64 at
// 1 in 65,024).
func TestProbeAddressSpread(t *testing.T) {
	const n = 64
	seen := map[string]string{}
	xs := map[byte]bool{}
	collisions := 0
	for i := range n {
		tag := "v1.2." + strings.Repeat("0", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		addr, _, _ := renderProbeAddress(t, "image: {tag: "+tag+"}", "")
		ip := net.ParseIP(addr).To4()
		if ip == nil || ip[0] != 127 || ip[1] < 1 || ip[1] > 254 || ip[3] != 1 {
			t.Fatalf("tag %s: probe address %q, want 127.X.Y.1 with X in 1..254", tag, addr)
		}
		xs[ip[1]] = true
		if prev, ok := seen[addr]; ok {
			collisions++
			t.Logf("tags %s and %s share %s", prev, tag, addr)
		}
		seen[addr] = tag
	}
	if collisions > 1 {
		t.Errorf("%d of %d revisions share an address with another", collisions, n)
	}
	// 64 draws from 254 values of X give about 57 distinct ones.
	if len(xs) < 40 {
		t.Errorf("%d revisions use only %d values of the second octet: poorly spread", n, len(xs))
	}
}

// TestProbeAddressValues checks an explicit probeAddress, "" (every address,
// probes to the pod IP), and the values the chart refuses.
func TestProbeAddressValues(t *testing.T) {
	if addr, _, _ := renderProbeAddress(t, "probeAddress: 127.53.0.9", ""); addr != "127.53.0.9" {
		t.Errorf("explicit probeAddress rendered as %q", addr)
	}
	addr, tmpl, _ := renderProbeAddress(t, `probeAddress: ""`, "")
	if addr != "" {
		t.Errorf(`probeAddress "": probes to %q, want the pod IP (no host)`, addr)
	}
	for _, c := range append(tmpl.Spec.InitContainers, tmpl.Spec.Containers...) {
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--health=") && a != "--health=:9254" {
				t.Errorf(`probeAddress "": %s`, a)
			}
		}
	}
	for _, bad := range []string{
		"10.0.0.1", "127.0.0.256", "127.1", "::1", "localhost", "127.01.2.3", " 127.1.2.1", "automatic", "127",
	} {
		vals := map[string]any{"probeAddress": bad}
		_, err := Render(vals, onEmptyCluster())
		if err == nil || !strings.Contains(err.Error(), "probeAddress must be") {
			t.Errorf("probeAddress %q: %v, want a render error naming probeAddress", bad, err)
		}
	}
}
