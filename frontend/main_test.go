package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// The test binary doubles as the frontend binary: with this variable set it
// runs main's code on its arguments (see TestSIGTERMDrains).
const execEnv = "NODEDNS_FRONTEND_TEST_EXEC"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// backend is a fake local backend: it answers A 192.0.2.1 for any name,
// 40 A records for names under big., and waits 500ms for names under slow.
type backend struct {
	queries atomic.Int64
}

func (b *backend) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	b.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	n := 1
	if strings.HasSuffix(q.Name, "big.") {
		n = 40
	}
	if strings.HasSuffix(q.Name, "slow.") {
		time.Sleep(500 * time.Millisecond)
	}
	if q.Qtype == dns.TypeA {
		for i := range n {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A:   net.IPv4(192, 0, 2, byte(1+i)),
			})
		}
	}
	_ = w.WriteMsg(m)
}

// baseArgs are the flags of a frontend that runs unprivileged on loopback,
// with its handover socket in a directory of its own.
func baseArgs(t *testing.T, backendAddr string) []string {
	return []string{
		"--setup-network=false", "--listen=127.0.0.1:0",
		"--metrics=127.0.0.1:0", "--health=127.0.0.1:0",
		"--backend=" + backendAddr, "--log-level=warn",
		"--handover-dir=" + t.TempDir(),
	}
}

// startRun runs the frontend in-process until the test ends.
func startRun(t *testing.T, args ...string) listening {
	t.Helper()
	cfg, err := parseConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, func(l listening) { started <- l }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case l := <-started:
		return l
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not start within 10s")
	}
	return listening{}
}

func TestRunServesHitsAndMisses(t *testing.T) {
	be := &backend{}
	b := dnstest.Start(t, be)
	l := startRun(t, baseArgs(t, b.Addr)...)
	addr := l.DNS[0]
	for i, network := range []string{"udp", "udp", "tcp"} {
		r := dnstest.Exchange(t, network, addr, dnstest.Query("www.example.org", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("query %d over %s: %v", i, network, r)
		}
	}
	if got := be.queries.Load(); got != 1 {
		t.Errorf("backend queries = %d, want 1 (one miss, then hits)", got)
	}
	// A query the backend never saw, over TCP first.
	r := dnstest.Exchange(t, "tcp", addr, dnstest.Query("tcp-first.example.org", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("tcp miss: %v", r)
	}

	body := httpGet(t, "http://"+l.Metrics+"/metrics", http.StatusOK)
	for _, series := range []string{
		`nodedns_server_packets_total{proto="udp",direction="in"} 2`,
		`nodedns_server_packets_total{proto="tcp",direction="in"} 2`,
		"nodedns_server_batch_size_bucket",
		"nodedns_server_inflight 0",
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %q", series)
		}
	}
	if body := httpGet(t, "http://"+l.Health+"/ready", http.StatusOK); !strings.Contains(body, "backend") {
		t.Errorf("/ready body %q: want the backend's state", body)
	}
	httpGet(t, "http://"+l.Health+"/health", http.StatusOK)
}

// TestRunTruncates asks for an answer larger than 512 bytes without EDNS:
// UDP gets TC (RFC 1035 4.2.1), TCP gets it all, EDNS with room gets it all.
func TestRunTruncates(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	l := startRun(t, baseArgs(t, b.Addr)...)
	addr := l.DNS[0]
	q := dnstest.Query("many.big", dns.TypeA)
	full := dnstest.Exchange(t, "tcp", addr, q)
	if full.Truncated || len(full.Answer) != 40 {
		t.Fatalf("tcp: tc=%v answers=%d, want 40", full.Truncated, len(full.Answer))
	}
	r := dnstest.Exchange(t, "udp", addr, q)
	if !r.Truncated {
		t.Errorf("udp without EDNS: %d answers and no TC", len(r.Answer))
	}
	q.SetEdns0(4096, false)
	if r := dnstest.Exchange(t, "udp", addr, q); r.Truncated || len(r.Answer) != 40 {
		t.Errorf("udp with EDNS 4096: tc=%v answers=%d", r.Truncated, len(r.Answer))
	}
}

func TestRunBackendDown(t *testing.T) {
	// A closed port: every miss fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	l := startRun(t, baseArgs(t, dead)...)
	r := dnstest.Exchange(t, "udp", l.DNS[0], dnstest.Query("example.org", dns.TypeA))
	if r.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

func httpGet(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, want)
	}
	return string(b)
}

// TestSIGTERMDrains runs the binary, sends SIGTERM while a miss is being
// resolved, and checks that the answer still arrives and the exit is clean.
func TestSIGTERMDrains(t *testing.T) {
	be := &backend{}
	b := dnstest.Start(t, be)
	cmd := exec.Command(os.Args[0], append(baseArgs(t, b.Addr), "--log-level=info")...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	addr, logs := readyAddr(t, stderr)

	answered := make(chan error, 1)
	go func() {
		c := &dns.Client{Timeout: 5 * time.Second}
		r, _, err := c.Exchange(dnstest.Query("a.slow", dns.TypeA), addr)
		if err == nil && r.Rcode != dns.RcodeSuccess {
			err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
		}
		answered <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); be.queries.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the miss never reached the backend")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Errorf("query in flight at SIGTERM: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v; log:\n%s", err, logs())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	if !strings.Contains(logs(), `"stopped"`) {
		t.Errorf("log lacks the stop message:\n%s", logs())
	}
}

// readyAddr reads the JSON log until the "ready" line and returns the first
// DNS address, and a function returning everything logged so far.
func readyAddr(t *testing.T, r io.Reader) (string, func() string) {
	t.Helper()
	lines := make(chan string, 100)
	var all atomic.Value
	all.Store("")
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			all.Store(all.Load().(string) + sc.Text() + "\n")
			lines <- sc.Text()
		}
		close(lines)
	}()
	logs := func() string { return all.Load().(string) }
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("exited before ready:\n%s", logs())
			}
			var entry struct {
				Msg string   `json:"msg"`
				DNS []string `json:"dns"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "ready" && len(entry.DNS) > 0 {
				go func() {
					for range lines { // keep draining so the process never blocks on stderr
					}
				}()
				return entry.DNS[0], logs
			}
		case <-timeout:
			t.Fatalf("not ready within 10s:\n%s", logs())
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen=localhost:53"}, "not an IP address"},
		{[]string{"--listen=127.0.0.1"}, "missing port"},
		{[]string{"--listen=127.0.0.1:53,127.0.0.1:53"}, "given twice"},
		{[]string{"--mode=ipvs"}, `--mode "ipvs"`},
		{[]string{"--mode=iptables", "--setup-network=true"}, "needs --service-ip"},
		{[]string{"--local-ip=not-an-ip"}, "not an IP address"},
		{[]string{"--sync-interval=10"}, "missing unit"},
		{[]string{"--shutdown-timeout=0s"}, "--shutdown-timeout"},
		{[]string{"--answer-timeout=0s"}, "--answer-timeout"},
		{[]string{"--answer-timeout=50ms"}, "--answer-timeout"},
		{[]string{"--answer-timeout=5s"}, "below --shutdown-timeout (5s)"},
		{[]string{"--answer-timeout=3s", "--shutdown-timeout=2s"}, "--answer-timeout"},
		{[]string{"--max-inflight=0"}, "--max-inflight"},
		{[]string{"--max-inflight-per-source=-1"}, "--max-inflight-per-source"},
		{[]string{"--max-inflight=100", "--max-inflight-per-source=101"}, "--max-inflight-per-source"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--backend=127.0.0.1"}, "--backend"},
		{[]string{"--metrics=:9253", "--health=:9253"}, "both"},
		{[]string{"--backend-ready-url=https://127.0.0.1:8181/ready"}, "--backend-ready-url"},
		{[]string{"--max-ttl=1.5s"}, "whole seconds"},
		{[]string{"--query-log=.", "--query-log-sample=0"}, "--query-log"},
		{[]string{"--query-log=bad..zone"}, "--query-log"},
		{[]string{"--top-talkers=-1"}, "--top-talkers"},
		{[]string{"--no-such-flag"}, "not defined"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"--setup-network=false"}, tc.args...)
			var stderr strings.Builder
			code := realMain(args, io.Discard, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

func TestGoodFlags(t *testing.T) {
	cfg, err := parseConfig([]string{
		"--listen=169.254.20.10:53,[fd00::a]:53", "--service-ip=10.96.0.10", "--fallback=10.96.0.11:5301",
		"--sync-interval=30s", "--cache-size=500", "--serve-stale=0s",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.listen) != 2 || cfg.syncInterval != 30*time.Second || cfg.cache.Size != 500 || cfg.cache.ServeStale != 0 ||
		!cfg.setupNetwork || cfg.mode != "iptables" || len(cfg.fallbacks) != 1 {
		t.Fatalf("parsed %+v", cfg)
	}
}

func TestVersionAndDiagnose(t *testing.T) {
	var out strings.Builder
	if code := realMain([]string{"-version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "nodedns-frontend ") {
		t.Errorf("-version: exit %d, %q", code, out.String())
	}
	if code := realMain([]string{"diagnose"}, io.Discard, io.Discard); code == 0 {
		t.Errorf("diagnose: exit 0 from a stub")
	}
}

// TestRunHandover starts a second instance next to a running one: it takes
// the sockets over through the handover directory and serves the same port.
func TestRunHandover(t *testing.T) {
	be := &backend{}
	b := dnstest.Start(t, be)
	dir := t.TempDir()
	first := startRun(t, append(baseArgs(t, b.Addr), "--handover-dir="+dir)...)
	dnstest.Exchange(t, "udp", first.DNS[0], dnstest.Query("before.example", dns.TypeA))
	second := startRun(t, append(baseArgs(t, b.Addr), "--handover-dir="+dir)...)
	if second.DNS[0] != first.DNS[0] {
		t.Fatalf("second instance serves %s, want the first's %s", second.DNS[0], first.DNS[0])
	}
	// The first instance closes its HTTP listeners once it hands over.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := http.Get("http://" + first.Health + "/ready"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first instance still serves /ready after the handover")
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		r := dnstest.Exchange(t, network, second.DNS[0], dnstest.Query("after.example", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s after handover: %v", network, r)
		}
	}
	httpGet(t, "http://"+second.Health+"/ready", http.StatusOK)
}
