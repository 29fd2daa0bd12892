package difftest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/loadtest/scenario"
	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
	"github.com/nodedns/nodedns/testbed"
)

// peers are the designs nodedns replaces, run on loopback against the same
// API server for the convergence figures: the CoreDNS Deployment
// (kubeadm's Corefile, with its "cache 30") and NodeLocal DNSCache
// (node-cache's Corefile in front of it). Both forward to a spy of their
// own, so that their start-up probes do not count as the frontend's.
type peers struct {
	coredns, nodelocal string // DNS addresses
	spy                *spy
}

// kubeadmCorefile is kubeadm's Corefile on dnsAddr, its HTTP listeners on
// the given addresses, with the kubeconfig that stands for the in-cluster
// ServiceAccount and upstream for /etc/resolv.conf.
func kubeadmCorefile(dnsAddr, health, ready, metrics, kubeconfig, upstream string) string {
	return strings.NewReplacer(
		".:53 {", ".:"+port(dnsAddr)+" {\n    bind 127.0.0.1",
		"    health {", "    health "+health+" {",
		"    ready\n", "    ready "+ready+"\n",
		"prometheus :9153", "prometheus "+metrics,
		"forward . /etc/resolv.conf", "forward . "+upstream,
		"       pods insecure", "       kubeconfig "+kubeconfig+"\n       pods insecure",
	).Replace(testbed.KubeadmCorefile)
}

func (e *env) startPeers(t testing.TB) *peers {
	t.Helper()
	sp, err := startSpy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	kubeconfig, err := e.tb.KubeconfigFor("system:serviceaccount:kube-system:coredns", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &peers{spy: sp, coredns: dnstest.FreeAddr(t), nodelocal: dnstest.FreeAddr(t)}
	ready := dnstest.FreeAddr(t)
	core := kubeadmCorefile(p.coredns, dnstest.FreeAddr(t), ready, dnstest.FreeAddr(t), kubeconfig, sp.Addr)
	nl := scenario.NodeLocalCorefile(scenario.NodeLocal{
		Bind: []string{"127.0.0.1"}, Port: mustAtoi(port(p.nodelocal)), ClusterDNS: p.coredns,
		Upstream: sp.Addr, Health: dnstest.FreeAddr(t), Metrics: dnstest.FreeAddr(t),
	})
	for _, c := range []struct{ name, corefile, wait string }{
		{"coredns", core, ready},
		{"nodelocal", nl, ""},
	} {
		conf := filepath.Join(dir, c.name+".Corefile")
		if err := os.WriteFile(conf, []byte(c.corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		proc := proctest.Start(t, c.name, exec.Command(e.backend, "-conf", conf))
		addr := map[string]string{"coredns": p.coredns, "nodelocal": p.nodelocal}[c.name]
		waitFor(t, proc, 90*time.Second, c.name+" ready", func() bool {
			return (c.wait == "" || httpOK("http://"+c.wait+"/ready")) && proctest.Listening(addr)
		})
	}
	return p
}

func mustAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
