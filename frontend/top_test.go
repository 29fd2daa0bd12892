package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/server"
	"github.com/nodedns/nodedns/shared/dnstest"
)

// TestREADMEListsTopFlags checks the TOP section against the flags of
// `top`, as TestREADMEListsEveryFlag does FLAGS.
func TestREADMEListsTopFlags(t *testing.T) {
	var cfg topConfig
	checkFlagsListed(t, "TOP", newTopFlagSet(&cfg, io.Discard))
}

// askFrom sends one A query for name over UDP from the loopback address src.
func askFrom(t *testing.T, src, addr, name string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}}
	r, _, err := c.Exchange(dnstest.Query(name, dns.TypeA), addr)
	if err != nil {
		t.Fatalf("%s from %s: %v", name, src, err)
	}
	return r
}

// TestTopCommand: queries from two loopback addresses show up in /top
// (JSON) and in `nodedns-frontend top`'s table, most queries first.
func TestTopCommand(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	l := startRun(t, baseArgs(t, b.Addr)...)
	for range 3 {
		askFrom(t, "127.0.0.2", l.DNS[0], "example.org")
	}
	askFrom(t, "127.0.0.3", l.DNS[0], "example.org")

	resp, err := http.Get("http://" + l.Metrics + "/top")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var top server.Talkers
	if err := json.NewDecoder(resp.Body).Decode(&top); err != nil {
		t.Fatal(err)
	}
	if len(top.Talkers) != 2 || top.Talkers[0].Addr != "127.0.0.2" || top.Talkers[0].Queries != 3 ||
		top.Talkers[1].Addr != "127.0.0.3" || top.Talkers[1].Queries != 1 {
		t.Errorf("/top: %+v, want 127.0.0.2 with 3 queries, then 127.0.0.3 with 1", top.Talkers)
	}

	var out, errOut strings.Builder
	if code := realMain([]string{"top", "--metrics=" + l.Metrics, "-n=1"}, &out, &errOut); code != 0 {
		t.Fatalf("top: exit %d: %s", code, errOut.String())
	}
	if !regexp.MustCompile(`(?m)^ +ADDRESS +QUERIES +NXDOMAIN +SERVFAIL +REFUSED +OVERLOADED\s*$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^ +127\.0\.0\.2 +3 +0 +0 +0 +0\s*$`).MatchString(out.String()) ||
		strings.Contains(out.String(), "127.0.0.3") || !strings.Contains(out.String(), "(1 more; -n=0 shows all)") {
		t.Errorf("top -n=1 printed:\n%s", out.String())
	}
}

func TestTopCommandErrors(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	l := startRun(t, append(baseArgs(t, b.Addr), "--top-talkers=0")...)
	var errOut strings.Builder
	if code := realMain([]string{"top", "--metrics=" + l.Metrics}, io.Discard, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "--top-talkers=0") {
		t.Errorf("top against --top-talkers=0: exit %d, %q; want 1 naming the flag", code, errOut.String())
	}
	for _, args := range [][]string{{"--metrics=nohost"}, {"-n=-1"}, {"extra"}} {
		if code := realMain(append([]string{"top"}, args...), io.Discard, io.Discard); code != 2 {
			t.Errorf("top %q: exit %d, want 2", args, code)
		}
	}
}

// TestQueryLogEveryLine: each sampled query is written (the process log's
// own sampling, 100 identical lines a second, does not apply), with its
// fields, within the query log's flush interval.
func TestQueryLogEveryLine(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	p := startProc(t, "--setup-network=false", "--listen=127.0.0.1:0", "--metrics=127.0.0.1:0", "--health=127.0.0.1:0",
		"--backend="+b.Addr, "--handover-dir=", "--query-log=example.org", "--query-log-sample=1")
	const n = 300
	for range n {
		askFrom(t, "127.0.0.2", p.ready.DNS[0], "www.example.org")
	}
	askFrom(t, "127.0.0.2", p.ready.DNS[0], "example.net") // outside the zone
	var lines []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines = regexp.MustCompile(`(?m)^.*"msg":"query".*$`).FindAllString(p.logs(), -1)
		if len(lines) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lines) != n {
		t.Fatalf("%d query log lines, want %d", len(lines), n)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(lines[n-1]), &e); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"logger": "query", "client": "127.0.0.2", "proto": "udp", "name": "www.example.org.", "type": "A", "rcode": "NOERROR", "answer": "hit"} {
		if e[k] != v {
			t.Errorf("%s = %v, want %v in %s", k, e[k], v, lines[n-1])
		}
	}
	if _, ok := e["latency"].(float64); !ok {
		t.Errorf("no latency in %s", lines[n-1])
	}
}
