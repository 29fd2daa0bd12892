package main

import (
	"bytes"
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

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

// runBackendEnv makes the test binary act as nodedns-backend (TestMain): the
// tests run the code under test as a separate process without linking CoreDNS
// a second time. NODEDNS_BACKEND_BIN runs a built binary instead.
const runBackendEnv = "NODEDNS_TEST_RUN_BACKEND"

func TestMain(m *testing.M) {
	if os.Getenv(runBackendEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// backendCommand returns the command that runs the backend with args.
func backendCommand(ctx context.Context, args ...string) *exec.Cmd {
	if bin := os.Getenv("NODEDNS_BACKEND_BIN"); bin != "" {
		return exec.CommandContext(ctx, bin, args...)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runBackendEnv+"=1")
	return cmd
}

// backend is a running nodedns-backend process.
type backend struct {
	DNS, Fallback          string            // host:port, UDP and TCP
	Health, Ready, Metrics string            // host:port, HTTP
	proc                   *proctest.Process // nil until started
	// bin, when set, is run instead of nodedns-backend (another CoreDNS
	// build); corefile and extraEnv are what restart starts it with again.
	bin      string
	corefile string
	extraEnv []string
	// wrap, when set, rewrites each command before it starts (the memory
	// study starts it in a memory cgroup).
	wrap func(*exec.Cmd) *exec.Cmd
}

// backendPorts picks free loopback ports for the listeners of one backend
// and returns them with the environment that points the default Corefile's
// variables at them.
func backendPorts(t testing.TB) (*backend, []string) {
	t.Helper()
	b := &backend{
		DNS:      dnstest.FreeAddr(t),
		Fallback: dnstest.FreeAddr(t),
		Health:   dnstest.FreeAddr(t),
		Ready:    dnstest.FreeAddr(t),
		Metrics:  dnstest.FreeAddr(t),
	}
	return b, b.env()
}

// env points the default Corefile's variables at b's addresses.
func (b *backend) env() []string {
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	return []string{
		"NODEDNS_BIND=127.0.0.1",
		"NODEDNS_PORT=" + port(b.DNS),
		"NODEDNS_FALLBACK_PORT=" + port(b.Fallback),
		"NODEDNS_HEALTH=" + b.Health,
		"NODEDNS_READY=" + b.Ready,
		"NODEDNS_METRICS=" + b.Metrics,
	}
}

// start runs the backend with corefile and env and waits until /ready
// answers 200. The process is stopped when the test ends.
func (b *backend) start(t testing.TB, corefile string, env []string, ready time.Duration) {
	t.Helper()
	b.launch(t, corefile, env)
	if err := b.waitReady(ready); err != nil {
		t.Fatalf("backend not ready: %v\noutput:\n%s", err, b.proc.Output.String())
	}
}

// launch runs the backend with corefile and env without waiting for it. The
// process is stopped when the test ends.
func (b *backend) launch(t testing.TB, corefile string, env []string) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := backendCommand(context.Background(), "-conf", conf)
	if b.bin != "" {
		cmd = exec.CommandContext(context.Background(), b.bin, "-conf", conf)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, env...)
	if b.wrap != nil {
		cmd = b.wrap(cmd)
	}
	b.proc = proctest.Start(t, "backend", cmd)
}

// stop sends SIGTERM and waits; lameduck is part of the wait.
func (b *backend) stop() {
	if b.proc != nil {
		b.proc.Stop()
	}
}

func (b *backend) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "http://" + b.Ready + "/ready"
	for {
		select {
		case <-b.proc.Done():
			return fmt.Errorf("backend exited: %v", b.proc.Err())
		default:
		}
		// CoreDNS starts the ready listener, and waits for the kubernetes
		// plugin's sync, before it binds the DNS sockets: /ready can say
		// 200 a moment before queries are answered. Wait for both.
		code, _, err := httpGet(url)
		if err == nil && code == http.StatusOK && proctest.Listening(b.DNS) && proctest.Listening(b.Fallback) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: code %d, err %v after %v", url, code, err, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpGet(url string) (int, string, error) {
	// Generous: a backend whose GC fights a tight GOMEMLIMIT on two busy
	// cores can take seconds to serve /metrics.
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String(), err
}

// metricValue returns the value of the first sample of name in a Prometheus
// text exposition whose labels contain every string in labels.
func metricValue(text, name string, labels ...string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			f := strings.Fields(line)
			return f[len(f)-1], true
		}
	}
	return "", false
}

// backendCommandTest runs this test binary (not the backend) with args.
func backendCommandTest(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(os.Args[0], args...)
}
