// Package proctest runs the project's binaries as child processes of a
// test: their output is kept, and logged if the test fails, and they are
// stopped (SIGTERM, then SIGKILL after StopGrace) when the test ends.
package proctest

import (
	"bytes"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before it kills the
// process: the backend's lameduck and the frontend's teardown fit in it.
const StopGrace = 15 * time.Second

// Process is a started command.
type Process struct {
	Cmd    *exec.Cmd
	Output *Buffer // the command's stdout and stderr

	done chan struct{} // closed once Wait returned
	err  error         // Wait's result; set before done is closed
}

// Start starts cmd with its stdout and stderr going to Output. When the test
// ends it stops the process and, if the test failed, logs its output under
// name.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, Output: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output.String())
		}
	})
	return p
}

// Done is closed when the process has exited; Err then returns Wait's result.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns Wait's result once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits for the process to exit, killing it after
// StopGrace. Stopping a process that has exited does nothing.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Listening reports whether addr accepts TCP connections. A DNS server's
// /ready can answer a moment before its DNS listeners are open.
func Listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Buffer is a bytes.Buffer safe for concurrent use: a process's stdout and
// stderr write to it while the test reads it.
type Buffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
