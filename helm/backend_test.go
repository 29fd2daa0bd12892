package helm

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/proctest"
)

// backendBinary returns nodedns-backend: $NODEDNS_BACKEND_BIN, or the
// binary the image would hold.
func backendBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NODEDNS_BACKEND_BIN"); bin != "" {
		return bin
	}
	return imageBinary(t, "nodedns-backend")
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// runChartBackend starts nodedns-backend as the chart configures it: the
// rendered Corefile and environment, with two changes a process outside a
// pod needs. The kubernetes plugin gets kubeconfig (in a pod it uses the
// ServiceAccount's in-cluster config), and every listener moves to a free
// loopback port. Upstreams are a closed loopback port, so no query leaves
// the machine. It returns the DNS address once /ready answers 200.
func runChartBackend(t *testing.T, ctx context.Context, kubeconfig string) string {
	t.Helper()
	vals := map[string]any{"upstreams": []any{"127.0.0.1:1"}}
	r, err := Render(vals, onEmptyCluster())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	corefile := ConfigMaps(objs)["nodedns-backend"].Data["Corefile"]
	const kube = "kubernetes {$NODEDNS_CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {"
	if !strings.Contains(corefile, kube) {
		t.Fatalf("no kubernetes block in the Corefile:\n%s", corefile)
	}
	corefile = strings.Replace(corefile, kube, kube+"\n            kubeconfig "+kubeconfig, 1)
	file := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(file, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}

	cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "node-a", IP: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	be := cs[0]
	if be.Spec.Name != "backend" {
		t.Fatalf("first container %s", be.Spec.Name)
	}
	port, ready := freePort(t), freePort(t)
	override := map[string]string{
		"NODEDNS_PORT":          port,
		"NODEDNS_FALLBACK_PORT": freePort(t),
		"NODEDNS_READY":         "127.0.0.1:" + ready,
		"NODEDNS_HEALTH":        "127.0.0.1:" + freePort(t),
		"NODEDNS_METRICS":       "127.0.0.1:" + freePort(t),
	}
	var env []string
	for _, kv := range be.Env {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := override[k]; ok {
			kv = k + "=" + v
		}
		env = append(env, kv)
	}
	args := be.Command[1:]
	for i := range args {
		if args[i] == "/etc/nodedns/Corefile" {
			args[i] = file
		}
	}
	cmd := exec.CommandContext(ctx, backendBinary(t), args...)
	cmd.Env = env
	proctest.Start(t, "backend", cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + ready + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && proctest.Listening("127.0.0.1:"+port) {
				return "127.0.0.1:" + port
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend not ready after 60s (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lookupA asks addr over TCP (as the frontend does) for name's A records.
func lookupA(t *testing.T, addr, name string) []string {
	t.Helper()
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	in, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	if in.Rcode != dns.RcodeSuccess {
		t.Fatalf("query %s: %s", name, dns.RcodeToString[in.Rcode])
	}
	var ips []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			ips = append(ips, a.A.String())
		}
	}
	return ips
}
