package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nodedns/nodedns/shared/metrics"
)

// echoEnv makes the test binary an echo server on the address it holds
// (see TestHitCPU), so that the server's CPU time can be read apart from
// the load generator's.
const echoEnv = "NODEDNS_SERVER_ECHO"

func TestMain(m *testing.M) {
	if addr := os.Getenv(echoEnv); addr != "" {
		os.Exit(echoServe(addr))
	}
	os.Exit(m.Run())
}

// echoServe serves echoHandler on addr, prints the bound address and runs
// until stdin closes.
func echoServe(addr string) int {
	s, err := New(Config{Listen: []string{addr}}, &echoHandler{}, zap.NewNop(), metrics.NewSet())
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.Addrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = s.Shutdown(context.Background())
	return 0
}

// TestHitCPU measures queries per CPU-second of the server process alone
// on the hit path, with dnsperf as the load. It runs only when asked:
//
//	NODEDNS_MEASURE_SECONDS=10 go test ./frontend/server -run HitCPU -v
func TestHitCPU(t *testing.T) {
	secs := os.Getenv("NODEDNS_MEASURE_SECONDS")
	if secs == "" {
		t.Skip("set NODEDNS_MEASURE_SECONDS to measure")
	}
	dnsperf, err := exec.LookPath("dnsperf")
	if err != nil {
		t.Skip("dnsperf not installed (Debian package dnsperf)")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), echoEnv+"=127.0.0.1:0")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(strings.TrimSpace(line), ":")
	data := filepath.Join(t.TempDir(), "queries")
	if err := os.WriteFile(data, []byte("hit.example.org A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cpu0 := procCPU(t, cmd.Process.Pid)
	start := time.Now()
	out, err := exec.Command(dnsperf, "-s", host, "-p", port, "-d", data, "-l", secs, "-c", "4", "-q", "256").CombinedOutput()
	if err != nil {
		t.Fatalf("dnsperf: %v\n%s", err, out)
	}
	wall := time.Since(start)
	cpu := procCPU(t, cmd.Process.Pid) - cpu0
	m := regexp.MustCompile(`Queries completed:\s+(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("dnsperf output:\n%s", out)
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("%.0f queries in %v: %.0f q/s, server CPU %v: %.0f q/CPU-s", n, wall.Round(time.Millisecond), n/wall.Seconds(), cpu, n/cpu.Seconds())
}

// procCPU returns the user+system CPU time of process pid.
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14 and stime 15 (proc(5)), in clock ticks of 10ms.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
