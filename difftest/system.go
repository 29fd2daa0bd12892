package difftest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// system is one Corefile shape running: the backend with the chart's
// Corefile, the recording proxy, and the frontend with the chart's flags.
type system struct {
	shape       string
	backendDNS  string // the backend's listener for its frontend
	frontendDNS string
	hist        *history
	flags       map[string]string // the frontend's flags as the chart renders them
	notes       string            // NOTES.txt
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// pluginOpen is the line opening the kubernetes plugin's block.
var pluginOpen = regexp.MustCompile(`(?m)^(\s*)(nodedns_kubernetes|kubernetes)\s.*\{\s*$`)

// withKubeconfig adds "kubeconfig PATH" to each kubernetes plugin block of
// corefile: it stands for the in-cluster ServiceAccount of the chart's pod.
func withKubeconfig(corefile, kubeconfig string) (string, error) {
	if !pluginOpen.MatchString(corefile) {
		return "", fmt.Errorf("no kubernetes plugin block in the Corefile:\n%s", corefile)
	}
	return pluginOpen.ReplaceAllStringFunc(corefile, func(line string) string {
		indent := pluginOpen.FindStringSubmatch(line)[1]
		return line + "\n" + indent + "    kubeconfig " + kubeconfig
	}), nil
}

// frontendKept are the frontend flags the chart renders that decide
// answers (cache, resolver, limits); the others (addresses, node
// networking, handover, holder) are replaced for a run on loopback.
var frontendKept = []string{
	"max-inflight", "shed-delay", "cache-size", "negative-cache-size", "min-ttl", "max-ttl",
	"negative-max-ttl", "servfail-ttl", "serve-stale", "prefetch", "cluster-domain",
	"cluster-negative-max-ttl", "search-prefetch", "deny-below-nxdomain", "shutdown-timeout",
	// The pod's address passed to the backend must not change an answer.
	"pass-client-address",
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startSystem renders the chart with values (the spy as upstream) and
// runs its backend and frontend on loopback against the testbed.
func (e *env) startSystem(t testing.TB, name string, values map[string]any) *system {
	t.Helper()
	node := helm.Node{Name: "difftest", IP: "127.0.0.1"}
	cs, err := helm.NodeContainers(helm.WithoutCluster(values), helm.Options{}, node)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	r, err := helm.Render(helm.WithoutCluster(values), helm.Options{})
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var corefile string
	for _, cm := range helm.ConfigMaps(objs) {
		if c, ok := cm.Data["Corefile"]; ok {
			corefile = c
		}
	}
	if corefile == "" {
		t.Fatal("the chart rendered no Corefile")
	}
	kubeconfig, err := e.tb.KubeconfigFor("system:serviceaccount:kube-system:nodedns", "system:masters")
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	corefile, err = withKubeconfig(corefile, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	var be, fe helm.Container
	for _, c := range cs {
		switch c.Spec.Name {
		case "backend":
			be = c
		case "frontend":
			fe = c
		}
	}
	s := &system{shape: name, notes: r.Notes, flags: map[string]string{}}

	// The backend: the chart's environment, with loopback addresses and
	// free ports for its listeners.
	dnsAddr, fallback, ready, health, metrics := dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	override := map[string]string{
		"NODEDNS_BIND": "127.0.0.1", "NODEDNS_PORT": port(dnsAddr),
		"NODEDNS_FALLBACK_BIND": "127.0.0.1", "NODEDNS_FALLBACK_PORT": port(fallback),
		"NODEDNS_READY": ready, "NODEDNS_HEALTH": health, "NODEDNS_METRICS": metrics,
	}
	envv := os.Environ()
	for _, kv := range be.Env {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := override[k]; ok {
			kv = k + "=" + v
		}
		envv = append(envv, kv)
	}
	e.spy.armProbe()
	cmd := exec.Command(e.backend, "-conf", conf)
	cmd.Env = envv
	bp := proctest.Start(t, "nodedns-backend "+name, cmd)
	waitFor(t, bp, 90*time.Second, "backend ready", func() bool {
		return httpOK("http://"+ready+"/ready") && proctest.Listening(dnsAddr)
	})
	s.backendDNS = dnsAddr
	// The backend's loop plugin sends one query of its own to the
	// upstream at start; it is no client's, so the spy forgets it.
	if !e.spy.waitProbe(10 * time.Second) {
		t.Logf("%s: the spy saw no loop probe of the backend within 10s", name)
	}
	e.spy.reset()

	// The frontend: the chart's answer-deciding flags, on loopback.
	for _, a := range fe.Command[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if ok {
			s.flags[k] = v
		}
	}
	limits := holdLimits{clusterDomain: strings.ToLower(s.flags["cluster-domain"])}
	if limits.clusterDomain != "" {
		limits.clusterDomain += "."
	}
	for _, d := range []struct {
		flag string
		p    *time.Duration
	}{{"max-ttl", &limits.maxTTL}, {"negative-max-ttl", &limits.negativeMaxTTL}, {"cluster-negative-max-ttl", &limits.clusterNegativeMaxTTL}, {"servfail-ttl", &limits.servfailTTL}} {
		v, err := time.ParseDuration(s.flags[d.flag])
		if err != nil {
			t.Fatalf("the chart's --%s=%q: %v", d.flag, s.flags[d.flag], err)
		}
		*d.p = v
	}
	s.hist = newHistory(limits)
	px, err := startProxy(dnsAddr, s.hist)
	if err != nil {
		t.Fatalf("start the proxy: %v", err)
	}
	t.Cleanup(px.Close)
	s.frontendDNS = dnstest.FreeAddr(t)
	fhealth, fmetrics := dnstest.FreeAddr(t), dnstest.FreeAddr(t)
	args := []string{
		"--listen=" + s.frontendDNS, "--backend=" + px.Addr(), "--setup-network=false",
		"--metrics=" + fmetrics, "--health=" + fhealth, "--backend-ready-url=http://" + ready + "/ready",
		"--handover-dir=", "--log-level=warn",
	}
	for _, k := range frontendKept {
		if v, ok := s.flags[k]; ok {
			args = append(args, "--"+k+"="+v)
		}
	}
	fp := proctest.Start(t, "nodedns-frontend "+name, exec.Command(e.frontend, args...))
	waitFor(t, fp, 30*time.Second, "frontend ready", func() bool { return httpOK("http://" + fhealth + "/ready") })
	t.Logf("%s: backend %s, frontend %s %s", name, dnsAddr, s.frontendDNS, strings.Join(args[8:], " "))
	return s
}

// waitFor polls ok until it holds, failing t after timeout or when p
// exits.
func waitFor(t testing.TB, p *proctest.Process, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.Done():
			t.Fatalf("%s: the process exited: %v\n%s", what, p.Err(), p.Output.String())
		default:
		}
		if ok() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not after %s\n%s", what, timeout, p.Output.String())
		}
	}
}

// on reports a boolean flag of the frontend.
func (s *system) on(flag string) bool {
	v, _ := strconv.ParseBool(s.flags[flag])
	return v
}

var _ = slices.Contains[[]string]
