package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// proc is the frontend binary (this test binary, see TestMain) running as
// a process of its own.
type proc struct {
	cmd    *exec.Cmd
	ready  listening     // from its "ready" log line
	exited chan struct{} // closed when it has exited; err is set then
	err    error

	mu  sync.Mutex
	log []byte // its stderr so far
}

// startProc runs the frontend with args in a process of its own, waits for
// its "ready" log line, and kills it at the end of the test.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), exited: make(chan struct{})}
	// Under -race, a Go program sleeps 1s at exit unless told not to:
	// tests that time the exit would measure that sleep.
	p.cmd.Env = append(os.Environ(), execEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan listening, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(append(p.log, sc.Bytes()...), '\n')
			p.mu.Unlock()
			var e struct {
				Msg     string   `json:"msg"`
				DNS     []string `json:"dns"`
				Metrics string   `json:"metrics"`
				Health  string   `json:"health"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "ready" {
				ready <- listening{DNS: e.DNS, Metrics: e.Metrics, Health: e.Health}
			}
		}
		io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	select {
	case p.ready = <-ready:
	case <-p.exited:
		t.Fatalf("exited before ready (%v):\n%s", p.err, p.logs())
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready within 10s:\n%s", p.logs())
	}
	return p
}

// logs returns what the process has logged so far.
func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.log)
}
