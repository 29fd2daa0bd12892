package nodenet_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodedns/nodedns/frontend/nodenet"
)

// capNetRaw is CAP_NET_RAW's bit in /proc/PID/status's capability sets.
const capNetRaw = 13

// syncBuffer is the output of a process, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWithoutNetRaw runs the frontend in the node namespace as the chart
// runs it with frontend.iptablesBackend nft: root, with CAP_NET_RAW gone
// from its bounding set (setpriv), so that neither it nor the iptables
// commands it runs hold it. It returns the process and its output.
func (c *cluster) startWithoutNetRaw(t *testing.T, extra ...string) (*os.Process, *syncBuffer) {
	t.Helper()
	args := append([]string{"--bounding-set", "-net_raw", "--", frontendBinary(t)}, c.args(extra...)...)
	cmd := c.node.Command(context.Background(), "setpriv", args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the frontend without NET_RAW: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("frontend output:\n%s", out.String())
		}
	})
	return cmd.Process, out
}

// capabilities returns the effective and bounding sets of process pid,
// once it runs the frontend (the namespace's and setpriv's execs are done).
func capabilities(t *testing.T, pid int) (eff, bnd uint64) {
	t.Helper()
	waitFor(t, 10*time.Second, "the frontend's exec", func() bool {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && strings.HasSuffix(exe, "nodedns-frontend")
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		switch k {
		case "CapEff":
			eff = n
		case "CapBnd":
			bnd = n
		}
	}
	return eff, bnd
}

// TestKernelNoNetRaw runs the frontend's network setup in node namespaces
// without CAP_NET_RAW. On an nft-only node (kube-proxy's hint chain in
// iptables-nft, no legacy table) it takes the node over as with it: rules
// installed, the pod answered on every owned address, with the backend
// chosen by detection and by --iptables-backend=nft (the chart's
// frontend.iptablesBackend: nft, which leaves NET_RAW out). With
// --iptables-backend=legacy every iptables-legacy command is refused
// ("Permission denied (you must be root)"): no rule is installed and the
// setup errors are logged; on a node whose rules live in iptables-legacy,
// detection without NET_RAW cannot read them and says so.
func TestKernelNoNetRaw(t *testing.T) {
	for _, backend := range []string{"auto", "nft"} {
		t.Run("nft-only/"+backend, func(t *testing.T) {
			c := newCluster(t)
			c.node.Run("iptables-nft", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT") // kube-proxy's, in nft
			proc, out := c.startWithoutNetRaw(t, "--iptables-backend="+backend)
			eff, bnd := capabilities(t, proc.Pid)
			t.Logf("frontend pid %d: CapEff %016x, CapBnd %016x", proc.Pid, eff, bnd)
			if eff&(1<<capNetRaw) != 0 || bnd&(1<<capNetRaw) != 0 {
				t.Fatalf("the frontend holds CAP_NET_RAW (CapEff %x, CapBnd %x)", eff, bnd)
			}
			if eff&(1<<12) == 0 { // CAP_NET_ADMIN
				t.Fatalf("the frontend lacks CAP_NET_ADMIN (CapEff %x)", eff)
			}
			c.backend.ready.Store(true)
			waitFor(t, 15*time.Second, "/ready 200", func() bool {
				code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
				return code == http.StatusOK
			})
			waitFor(t, 10*time.Second, "IPv6 path from the pod", func() bool {
				_, err := ask(c.pod, "udp", "["+linkLocal6+"]:53", "v6.example.", time.Second)
				return err == nil
			})
			for _, addr := range []string{linkLocal + ":53", clusterIP + ":53", "[" + linkLocal6 + "]:53"} {
				for _, network := range []string{"udp", "tcp"} {
					got, err := ask(c.pod, network, addr, "svc.example.", 2*time.Second)
					if err != nil || got != localAns {
						t.Errorf("pod %s %s: %q, %v; want the local backend's %s", network, addr, got, err, localAns)
					}
				}
			}
			rules := c.nodednsRules(t)
			t.Logf("%d nodedns rules in iptables-nft", len(rules))
			if len(rules) == 0 {
				t.Error("no nodedns rule in iptables-nft")
			}
			if n := c.remote.Load(); n != 0 {
				t.Errorf("the other node answered %d queries: the ClusterIP was not taken over", n)
			}
			if s := out.String(); strings.Contains(s, "Permission denied") || !strings.Contains(s, `"backend":"nft"`) {
				t.Errorf("frontend log: a permission error, or no nft backend chosen:\n%s", s)
			}
		})
	}

	t.Run("legacy", func(t *testing.T) {
		c := newCluster(t)
		// kube-proxy's hint chain in iptables-legacy: the node's rules live there.
		c.node.Run("iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
		proc, out := c.startWithoutNetRaw(t, "--iptables-backend=legacy")
		if eff, _ := capabilities(t, proc.Pid); eff&(1<<capNetRaw) != 0 {
			t.Fatalf("the frontend holds CAP_NET_RAW (CapEff %x)", eff)
		}
		c.backend.ready.Store(true)
		waitFor(t, 15*time.Second, "a refused iptables-legacy command in the log", func() bool {
			return strings.Contains(out.String(), "Permission denied (you must be root)")
		})
		time.Sleep(time.Second) // two more syncs
		if rules := savedRules(t, c.node, nodenet.BackendLegacy); len(rules) != 0 {
			t.Errorf("%d nodedns rules in iptables-legacy without NET_RAW: %v", len(rules), rules)
		}
		code, body, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		t.Logf("without NET_RAW on iptables-legacy: /ready %d %q", code, strings.TrimSpace(body))
		if code == http.StatusOK {
			t.Error("/ready 200 without the rules")
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "Permission denied") {
				t.Logf("first refusal: %s", l)
				break
			}
		}
	})

	t.Run("legacy/auto", func(t *testing.T) {
		c := newCluster(t)
		c.node.Run("iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
		_, out := c.startWithoutNetRaw(t)
		waitFor(t, 15*time.Second, "the detection's warning", func() bool {
			return strings.Contains(out.String(), "iptables-legacy-save was denied")
		})
	})
}
