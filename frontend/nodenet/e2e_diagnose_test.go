package nodenet_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// diagnose runs `nodedns-frontend diagnose` in the node namespace with the
// frontend's flags plus extra, and returns its output and exit code.
func (c *cluster) diagnose(t *testing.T, resolv, kubelet string, extra ...string) (string, int) {
	t.Helper()
	args := append([]string{"diagnose"}, c.args("--resolv-conf="+resolv, "--kubelet-config="+kubelet, "--timeout=2s")...)
	args = append(args, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.node.Command(ctx, frontendBinary(t), args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("diagnose: %v\n%s", err, out)
	return "", -1
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestE2EDiagnose breaks a node one way at a time and checks that diagnose
// fails with the finding an operator needs.
func TestE2EDiagnose(t *testing.T) {
	c := newCluster(t)
	c.backend.ready.Store(true)
	// A long sync interval keeps the damage in place while diagnose looks.
	c.start(t, "--sync-interval=1h")
	waitFor(t, 10*time.Second, "takeover", func() bool { return c.linkExists() && len(c.nodednsRules(t)) == 42 })
	resolv := writeFile(t, "resolv.conf", "nameserver "+node2IP+"\n")
	kubelet := writeFile(t, "config.yaml", "kind: KubeletConfiguration\nclusterDNS:\n- "+clusterIP+"\n")

	healthy := func(t *testing.T) {
		t.Helper()
		out, code := c.diagnose(t, resolv, kubelet)
		if code != 0 {
			t.Fatalf("diagnose on a healthy node: exit %d\n%s", code, out)
		}
		t.Logf("healthy node:\n%s", out)
	}
	t.Run("healthy", healthy)

	for _, tc := range []struct {
		name   string
		breaks func(t *testing.T) (extra []string, resolv, kubelet string)
		want   []string // substrings of the output
	}{
		{"release table deleted", func(t *testing.T) ([]string, string, string) {
			if err := c.node.Do(deleteReleaseTable); err != nil {
				t.Fatal(err)
			}
			return nil, resolv, kubelet
		}, []string{"[FAIL] release table (nftables inet nodedns-release): absent"}},
		{"rule deleted", func(t *testing.T) ([]string, string, string) {
			c.node.Run("iptables", "-t", "raw", "-D", "PREROUTING", "-d", clusterIP+"/32", "-p", "udp", "-m", "udp", "--dport", "53",
				"-m", "comment", "--comment", "nodedns: notrack udp to 10.96.0.10:53", "-j", "NOTRACK")
			return nil, resolv, kubelet
		}, []string{"[FAIL] rules (iptables-nft): 1 of 42 rules missing", `raw/PREROUTING "nodedns: notrack udp to 10.96.0.10:53"`}},
		{"rules in the other backend", func(t *testing.T) ([]string, string, string) {
			c.node.Run("iptables-legacy", "-t", "raw", "-A", "PREROUTING", "-d", clusterIP, "-p", "udp", "--dport", "53",
				"-m", "comment", "--comment", "nodedns: left by an old instance", "-j", "NOTRACK")
			return nil, resolv, kubelet
		}, []string{"[FAIL] rules (iptables-legacy, unused): 1 nodedns rules"}},
		{"address removed", func(t *testing.T) ([]string, string, string) {
			c.node.Run("ip", "addr", "del", clusterIP+"/32", "dev", "nodedns")
			return nil, resolv, kubelet
		}, []string{"[FAIL] interface nodedns:", "lacks 10.96.0.10", "[FAIL] listener udp 10.96.0.10:53:", "the address is not on this node"}},
		{"port 53 held by another process", func(t *testing.T) ([]string, string, string) {
			// Port 53 of a node address the frontend does not serve, held
			// by this test's process as dnsmasq would hold it.
			var pc net.PacketConn
			var ln net.Listener
			if err := c.node.Do(func() (err error) {
				if pc, err = net.ListenPacket("udp", netnstest.NodeVethIP+":53"); err != nil {
					return err
				}
				ln, err = net.Listen("tcp", netnstest.NodeVethIP+":53")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close(); ln.Close() })
			return []string{"--listen=" + linkLocal + ":53," + clusterIP + ":53," + netnstest.NodeVethIP + ":53"}, resolv, kubelet
		}, []string{"[FAIL] listener udp 10.244.1.1:53: port 53 is held by nodenet.test (pid " + itoa(os.Getpid()) + `): the frontend gets "address already in use"`,
			"[FAIL] listener tcp 10.244.1.1:53: port 53 is held by nodenet.test", "[ok  ] listener udp 169.254.20.10:53: held by nodedns-fronten"}},
		{"nothing listens", func(t *testing.T) ([]string, string, string) {
			return []string{"--listen=" + netnstest.NodeVethIP + ":5354"}, resolv, kubelet
		}, []string{"[FAIL] listener udp 10.244.1.1:5354: nothing listens"}},
		{"backend hangs", func(t *testing.T) ([]string, string, string) {
			var ln net.Listener
			if err := c.node.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() }) // accepts (kernel backlog) but never answers
			return []string{"--backend=" + ln.Addr().String(), "--backend-ready-url="}, resolv, kubelet
		}, []string{"[FAIL] backend 127.0.0.1:", "i/o timeout", "does not answer in time"}},
		{"fallback unreachable", func(t *testing.T) ([]string, string, string) {
			return []string{"--fallback=" + node2IP + ":5399"}, resolv, kubelet
		}, []string{"[FAIL] fallback 10.0.0.2:5399: tcp 10.0.0.2:5399: connection refused"}},
		{"upstream resolver down", func(t *testing.T) ([]string, string, string) {
			return nil, writeFile(t, "resolv.conf", "nameserver "+node2IP+"\nnameserver 10.0.0.1\n"), kubelet
		}, []string{"[ok  ] upstream resolver 10.0.0.2", "[FAIL] upstream resolver 10.0.0.1: udp 10.0.0.1:53: connection refused"}},
		{"resolv.conf loops to nodedns", func(t *testing.T) ([]string, string, string) {
			return nil, writeFile(t, "resolv.conf", "nameserver "+linkLocal+"\n"), kubelet
		}, []string{"[FAIL] upstream resolver 169.254.20.10: is an address nodedns owns"}},
		{"kubelet clusterDNS wrong for the mode", func(t *testing.T) ([]string, string, string) {
			return []string{"--mode=link-local"}, resolv, kubelet
		}, []string{"[FAIL] kubelet clusterDNS:", "link-local mode needs --local-ip"}},
		{"backend not ready", func(t *testing.T) ([]string, string, string) {
			// The ready URL answers 503 (a plugin, e.g. kubernetes, not
			// synced) while the backend still answers over TCP.
			c.backend.ready.Store(false)
			t.Cleanup(func() { c.backend.ready.Store(true) })
			return nil, resolv, kubelet
		}, []string{"[FAIL] backend 127.0.0.1:", "not ready: 503", "a plugin is not ready"}},
		{"conntrack near full", func(t *testing.T) ([]string, string, string) {
			fillConntrack(t, c.node, 0.92)
			return nil, resolv, kubelet
		}, []string{"[FAIL] conntrack:", "the table is nearly full"}},
		{"backend down", func(t *testing.T) ([]string, string, string) {
			c.backend.kill()
			return nil, resolv, kubelet
		}, []string{"[FAIL] backend 127.0.0.1:", "connection refused", "is nodedns-backend running?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra, r, k := tc.breaks(t)
			out, code := c.diagnose(t, r, k, extra...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("diagnose:\n%s", out)
			}
		})
	}
}

// TestE2EDiagnoseSkip: a check that cannot run (kubelet's configuration
// not mounted) is marked SKIP and named in the last line, and diagnose
// still exits 0: it never reads as passed.
func TestE2EDiagnoseSkip(t *testing.T) {
	c := newCluster(t)
	c.backend.ready.Store(true)
	c.start(t, "--sync-interval=1h")
	waitFor(t, 10*time.Second, "takeover", func() bool { return c.linkExists() && len(c.nodednsRules(t)) == 42 })
	resolv := writeFile(t, "resolv.conf", "nameserver "+node2IP+"\n")
	missing := filepath.Join(t.TempDir(), "config.yaml")
	out, code := c.diagnose(t, resolv, missing)
	if code != 0 {
		t.Errorf("exit %d, want 0 (a skipped check is no failure)", code)
	}
	for _, w := range []string{"[SKIP] kubelet clusterDNS: kubelet's configuration is not readable here", "to run it: in the nodedns pod, set the chart's frontend.kubeletConfig",
		"no check failed; 1 not run: kubelet clusterDNS"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "[ok  ] kubelet") || strings.Contains(out, "all checks passed") {
		t.Errorf("a check that did not run reads as passed:\n%s", out)
	}
}

// fillConntrack adds UDP flows in ns until its conntrack
// table holds share of nf_conntrack_max: datagrams to a prefix routed to a
// bridge without ports and without ARP (no neighbour to wait for), so each
// flow is confirmed at POSTROUTING and the packet goes nowhere. The entries go with the cleanup (conntrack -F).
func fillConntrack(t *testing.T, ns *netnstest.NetNS, share float64) {
	t.Helper()
	netnstest.Require(t, "conntrack")
	read := func(name string) int {
		var n int
		if err := ns.Do(func() error {
			b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
			if err != nil {
				return err
			}
			n, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err
		}); err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return n
	}
	limit := read("nf_conntrack_max")
	// nf_conntrack_max is the host's (read-only in a namespace); past a
	// million entries the fill would take hundreds of MB of kernel memory.
	if limit > 1<<20 {
		t.Skipf("nf_conntrack_max is %d: filling 90%% of it would take too much kernel memory", limit)
	}
	need := int(share*float64(limit)) + 1 - read("nf_conntrack_count")
	t.Cleanup(func() { ns.Run("conntrack", "-F") })
	ns.Sysctl("net.netfilter.nf_conntrack_udp_timeout", "300")
	ns.Run("ip", "link", "add", "ctfill", "type", "bridge")
	ns.Run("ip", "link", "set", "ctfill", "arp", "off", "up")
	ns.Run("ip", "route", "add", "198.51.100.0/24", "dev", "ctfill")
	t.Cleanup(func() { ns.Run("ip", "link", "del", "ctfill") })
	// One socket per 65,535 flows, made in the namespace (a socket keeps
	// its namespace), each sending from its own goroutine.
	var conns []net.PacketConn
	if err := ns.Do(func() error {
		for range (need + 65534) / 65535 {
			pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
			if err != nil {
				return err
			}
			conns = append(conns, pc)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := make(chan error, len(conns))
	for i, pc := range conns {
		n := min(65535, need-i*65535)
		go func() {
			defer pc.Close()
			_ = pc.SetWriteDeadline(time.Now().Add(time.Minute))
			for port := 1; port <= n; port++ {
				if _, err := pc.WriteTo([]byte{0}, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 1), Port: port}); err != nil {
					errs <- fmt.Errorf("after %d datagrams: %w", port-1, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := read("nf_conntrack_count")
	t.Logf("conntrack: %d of %d entries after sending %d flows in %v", got, limit, need, time.Since(start).Round(time.Millisecond))
	if float64(got) < 0.9*float64(limit) {
		t.Fatalf("conntrack holds %d of %d entries, under the 90%% diagnose reports", got, limit)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// backendBinary is nodedns-backend: $NODEDNS_BACKEND_BIN (make test sets it
// to bin/nodedns-backend), else built once.
func backendBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NODEDNS_BACKEND_BIN"); bin != "" {
		return bin
	}
	return proctest.Build(t, "github.com/nodedns/nodedns/backend", "nodedns-backend")
}

// TestE2EDiagnoseRealBackend: diagnose against the real nodedns-backend
// whose kubernetes plugin cannot reach its API server (a closed port), as
// when a node loses the control plane at start: the ready plugin answers
// 503 naming the plugin while the backend answers over TCP, and diagnose
// says the backend is not ready and why. (The node was taken over with the
// fake backend, so the rules of this backend's address are missing too.)
func TestE2EDiagnoseRealBackend(t *testing.T) {
	c := newCluster(t)
	c.backend.ready.Store(true)
	c.start(t, "--sync-interval=1h")
	waitFor(t, 10*time.Second, "takeover", func() bool { return c.linkExists() && len(c.nodednsRules(t)) == 42 })
	const dnsAddr, readyAddr = "127.0.0.1:5310", "127.0.0.1:8191"
	corefile := writeFile(t, "Corefile", `.:5310 {
    bind 127.0.0.1
    ready `+readyAddr+`
    kubernetes cluster.local {
        endpoint http://127.0.0.1:1
    }
}
`)
	c.node.Start(backendBinary(t), "-conf", corefile)
	waitFor(t, 30*time.Second, "the backend's listeners", func() bool {
		code, _, err := httpGet(c.node, readyAddr, "/ready")
		return err == nil && code != 0
	})
	resolv := writeFile(t, "resolv.conf", "nameserver "+node2IP+"\n")
	kubelet := writeFile(t, "config.yaml", "clusterDNS: ["+clusterIP+"]\n")
	out, code := c.diagnose(t, resolv, kubelet, "--backend="+dnsAddr, "--backend-ready-url=http://"+readyAddr+"/ready")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	// Whether the DNS listener is up yet (the plugin holds it back for its
	// startup timeout) or not, the finding names the plugin.
	for _, w := range []string{"[FAIL] backend " + dnsAddr + ":", "backend ready url http://" + readyAddr + "/ready: not ready: 503 Service Unavailable (kubernetes)",
		"fix: the backend runs but a plugin is not ready"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("diagnose:\n%s", out)
	}
}

// TestE2EDiagnoseUpstreamLoop: the real nodedns-backend forwards to the
// node's resolver, and the node's resolv.conf names 169.254.20.10, which
// the frontend owns: a miss goes from the frontend to the backend and back
// to the frontend. The pod gets SERVFAIL at --answer-timeout (2 s), or
// the fallback's answer once the backend's probes have failed; the backend
// logs no loop and keeps running; diagnose names the loop from resolv.conf.
// (Both answers are seen here, as is the backend's probe timing out.)
func TestE2EDiagnoseUpstreamLoop(t *testing.T) {
	c := newCluster(t)
	const dnsAddr, readyAddr = "127.0.0.1:5310", "127.0.0.1:8191"
	corefile := writeFile(t, "Corefile", `.:5310 {
    bind 127.0.0.1
    ready `+readyAddr+`
    forward . `+linkLocal+`:53
    loop
}
`)
	c.node.Start(backendBinary(t), "-conf", corefile)
	flags := []string{"--backend=" + dnsAddr, "--backend-ready-url=http://" + readyAddr + "/ready"}
	c.start(t, append([]string{"--sync-interval=1h"}, flags...)...)
	waitFor(t, 20*time.Second, "takeover", func() bool { return c.linkExists() && len(c.nodednsRules(t)) == 42 })
	start := time.Now()
	_, err := ask(c.pod, "udp", linkLocal+":53", "loop.example.", 5*time.Second)
	took := time.Since(start)
	// Which answer the pod gets depends on a race: while the backend's
	// health probes pass, the query runs round the loop until the
	// frontend's SERVFAIL; once they have failed (the probe runs round
	// the loop too, or meets the link-local address not yet held), the
	// backend is marked down and the fallback answers. Never silence.
	if err != nil && !strings.Contains(err.Error(), "rcode SERVFAIL") {
		t.Errorf("the pod's query through the loop: %v, want SERVFAIL or the fallback's answer", err)
	}
	t.Logf("the pod's query through the loop: %v after %v", err, took.Round(time.Millisecond))
	resolv := writeFile(t, "resolv.conf", "nameserver "+linkLocal+"\n")
	kubelet := writeFile(t, "config.yaml", "clusterDNS: ["+clusterIP+"]\n")
	out, code := c.diagnose(t, resolv, kubelet, flags...)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, w := range []string{"[FAIL] upstream resolver 169.254.20.10: is an address nodedns owns: names outside the cluster would loop",
		"[ok  ] rules (iptables-nft): all 42 rules present"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	// The backend's probe is forwarded round the loop too: it is answered
	// (SERVFAIL) or times out, depending on what else circles.
	if !strings.Contains(out, "[ok  ] backend "+dnsAddr+": ready and answering over TCP") &&
		!strings.Contains(out, "[FAIL] backend "+dnsAddr+": backend "+dnsAddr+": i/o timeout") {
		t.Errorf("output lacks the backend's line (answering, or timing out in the loop):\n%s", out)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("diagnose:\n%s", out)
	}
}
