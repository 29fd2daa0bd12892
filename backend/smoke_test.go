package main

import (
	"context"
	"net"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// kubernetesBlock matches the kubernetes stanza of the default Corefile.
var kubernetesBlock = regexp.MustCompile(`(?s)\n    (nodedns_)?kubernetes [^\n]*\{\n.*?\n    \}\n`)

// smokeCorefile is the default Corefile with the kubernetes stanza replaced
// by hosts and template, which answer without an API server.
func smokeCorefile(t testing.TB) string {
	t.Helper()
	core := string(defaultCorefile)
	if !kubernetesBlock.MatchString(core) {
		t.Fatal("default Corefile has no kubernetes stanza")
	}
	core = kubernetesBlock.ReplaceAllString(core, `
    hosts {
        192.0.2.10 static.test
        fallthrough
    }
    template IN A tmpl.test {
        answer "{{ .Name }} 60 IN A 192.0.2.20"
    }
`)
	return strings.Replace(core, "lameduck 5s", "lameduck 100ms", 1)
}

// fakeUpstream answers fwd.example with 192.0.2.1, NXDOMAIN to the rest, and
// counts the queries for fwd.example.
func fakeUpstream(t testing.TB, count *atomic.Int64) *dnstest.Server {
	return dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		if q.Name == "fwd.example." && q.Qtype == dns.TypeA {
			count.Add(1)
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.ParseIP("192.0.2.1"),
			})
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	}))
}

func TestSmoke(t *testing.T) {
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr)
	b.start(t, smokeCorefile(t), env, 20*time.Second)

	tests := []struct {
		name   string
		qtype  uint16
		rcode  int
		answer string // the A record's address, "" for none
	}{
		{"static.test.", dns.TypeA, dns.RcodeSuccess, "192.0.2.10"},
		{"x.tmpl.test.", dns.TypeA, dns.RcodeSuccess, "192.0.2.20"},
		{"fwd.example.", dns.TypeA, dns.RcodeSuccess, "192.0.2.1"},
		{"nx.example.", dns.TypeA, dns.RcodeNameError, ""},
	}
	for _, addr := range []string{b.DNS, b.Fallback} {
		for _, network := range []string{"udp", "tcp"} {
			for _, tc := range tests {
				t.Run(addr+"/"+network+"/"+tc.name, func(t *testing.T) {
					r := dnstest.Exchange(t, network, addr, dnstest.Query(tc.name, tc.qtype))
					if r.Rcode != tc.rcode {
						t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
					}
					if got := firstA(r); got != tc.answer {
						t.Fatalf("answer %q, want %q: %v", got, tc.answer, r)
					}
				})
			}
		}
	}
	// Eight queries for fwd.example went in; the cache kept all but the first
	// from the upstream.
	if n := fwd.Load(); n != 1 {
		t.Errorf("upstream saw %d queries for fwd.example, want 1 (cache)", n)
	}

	for _, url := range []string{"http://" + b.Health + "/health", "http://" + b.Ready + "/ready"} {
		code, body, err := httpGet(url)
		if err != nil || code != 200 {
			t.Errorf("GET %s: %d %q %v", url, code, body, err)
		}
	}
	_, text, err := httpGet("http://" + b.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{b.DNS, b.Fallback} {
		_, port, _ := net.SplitHostPort(server)
		if _, ok := metricValue(text, "coredns_dns_requests_total", ":"+port+`"`); !ok {
			t.Errorf("no coredns_dns_requests_total for port %s", port)
		}
	}
}

func TestPluginsFlag(t *testing.T) {
	out, err := backendCommand(context.Background(), "-plugins").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	if !slices.Equal(got, directives) {
		t.Errorf("-plugins printed %v, want %v", got, directives)
	}
	want := []string{"acl", "bind", "bufsize", "cache", "errors", "forward", "health", "hosts", "kubernetes",
		"loadbalance", "log", "loop", "nodedns_acl", "nodedns_bind", "nodedns_client", "nodedns_kubernetes", "prometheus", "ready", "reload", "rewrite", "template"}
	sorted := slices.Sorted(slices.Values(directives))
	if !slices.Equal(sorted, want) {
		t.Errorf("curated set is %v, want %v", sorted, want)
	}
}

func TestVersionFlag(t *testing.T) {
	out, err := backendCommand(context.Background(), "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "CoreDNS-1.15.0\n") || !strings.Contains(string(out), "nodedns-") {
		t.Errorf("-version printed %q", out)
	}
}

// TestDefaultCorefile checks that the embedded Corefile parses with the
// curated directives once the variable defaults are filled in, and listens
// where the team agreed.
func TestDefaultCorefile(t *testing.T) {
	for _, e := range envDefaults {
		t.Setenv(e.name, "")
	}
	if err := setup(); err != nil {
		t.Fatal(err)
	}
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(string(defaultCorefile)), directives)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("%d server blocks, want 2", len(blocks))
	}
	want := []struct {
		key  string
		dirs []string
	}{
		{".:5300", []string{"bind", "nodedns_client", "errors", "health", "ready", "prometheus", "nodedns_kubernetes", "forward", "cache", "loop", "reload", "loadbalance"}},
		{".:5301", []string{"nodedns_bind", "nodedns_client", "nodedns_acl", "errors", "prometheus", "forward"}},
	}
	for i, w := range want {
		if !slices.Equal(blocks[i].Keys, []string{w.key}) {
			t.Errorf("block %d keys %v, want %s", i, blocks[i].Keys, w.key)
		}
		for _, d := range w.dirs {
			if _, ok := blocks[i].Tokens[d]; !ok {
				t.Errorf("block %s has no %s", w.key, d)
			}
		}
		if len(blocks[i].Tokens) != len(w.dirs) {
			t.Errorf("block %s has %d directives, want %d", w.key, len(blocks[i].Tokens), len(w.dirs))
		}
	}
	text := func(block int, dir string) string {
		var s []string
		for _, tok := range blocks[block].Tokens[dir] {
			s = append(s, tok.Text)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		dir  string
		want string
	}{
		{"bind", "bind 127.0.0.1"},
		{"health", "health 127.0.0.1:9155 { lameduck 5s }"},
		{"ready", "ready 127.0.0.1:8181"},
		{"prometheus", "prometheus 127.0.0.1:9153"},
		{"nodedns_kubernetes", "nodedns_kubernetes cluster.local in-addr.arpa ip6.arpa { endpointslices spec pods insecure fallthrough in-addr.arpa ip6.arpa ttl 30 startup_timeout 60s snapshot none }"},
		{"forward", "forward . /etc/resolv.conf { max_concurrent 1000 prefer_udp }"},
	} {
		if got := text(0, c.dir); got != c.want {
			t.Errorf("%s: %q, want %q", c.dir, got, c.want)
		}
	}
	if got := text(1, "nodedns_bind"); got != "nodedns_bind 127.0.0.1" {
		t.Errorf("fallback bind: %q, want the loopback default", got)
	}
	if got := text(1, "nodedns_acl"); got != "nodedns_acl local,nodes { snapshot none }" {
		t.Errorf("fallback nodedns_acl: %q, want local,nodes", got)
	}
	if got := text(1, "forward"); got != "forward . 127.0.0.1:5300" {
		t.Errorf("fallback forward: %q", got)
	}
}

// TestGOMEMLIMIT checks that the backend's Go runtime takes its soft memory
// limit from GOMEMLIMIT, which the chart sets from the container's memory
// limit: once in a child process of this binary, and once through the
// running backend's go_gc_gomemlimit_bytes metric.
func TestGOMEMLIMIT(t *testing.T) {
	const limit = 150 << 20
	if os.Getenv("NODEDNS_TEST_PRINT_MEMLIMIT") == "1" {
		t.Logf("memlimit=%d", debug.SetMemoryLimit(-1))
		return
	}
	child := backendCommandTest(t, "-test.run=^TestGOMEMLIMIT$", "-test.v")
	child.Env = append(os.Environ(), "NODEDNS_TEST_PRINT_MEMLIMIT=1", "GOMEMLIMIT=150MiB")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "memlimit="+strconv.Itoa(limit)) {
		t.Errorf("child did not report memlimit=%d:\n%s", limit, out)
	}

	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr, "GOMEMLIMIT="+strconv.Itoa(limit))
	b.start(t, smokeCorefile(t), env, 20*time.Second)
	_, text, err := httpGet("http://" + b.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := metricValue(text, "go_gc_gomemlimit_bytes")
	if !ok {
		t.Fatal("no go_gc_gomemlimit_bytes in /metrics")
	}
	if v, _ := strconv.ParseFloat(got, 64); v != limit {
		t.Errorf("go_gc_gomemlimit_bytes = %s, want %d", got, limit)
	}
}

func firstA(r *dns.Msg) string {
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	return ""
}

// TestLameduck checks that after SIGTERM the backend keeps answering DNS and
// /health for the lameduck period, so the frontend can move misses away
// before the sockets close.
func TestLameduck(t *testing.T) {
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr)
	core := strings.Replace(smokeCorefile(t), "lameduck 100ms", "lameduck 2s", 1)
	b.start(t, core, env, 20*time.Second)

	if err := b.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	r := dnstest.Exchange(t, "tcp", b.DNS, dnstest.Query("static.test.", dns.TypeA))
	if got := firstA(r); got != "192.0.2.10" {
		t.Errorf("during lameduck: answer %q", got)
	}
	if code, _, err := httpGet("http://" + b.Health + "/health"); err != nil || code != 200 {
		t.Errorf("during lameduck: /health %d %v", code, err)
	}
	select {
	case <-b.proc.Done():
		if d := time.Since(start); d < 1500*time.Millisecond {
			t.Errorf("exited %v after SIGTERM, before the 2s lameduck", d)
		}
	case <-time.After(15 * time.Second):
		t.Error("still running 15s after SIGTERM")
	}
}
