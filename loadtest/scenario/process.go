package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL; the
// frontend's drain (--shutdown-timeout 5s) and CoreDNS's lameduck (5s)
// fit in it.
const stopGrace = 8 * time.Second

// process is a long-running program in a network namespace, its output
// in a log file.
type process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	start   func() (*process, error) // starts another process like this one
	done    chan struct{}
	err     error // set before done closes
}

// startProcess runs argv inside netns (none: this namespace) with env
// added to the environment, logging to dir/name.log. The kernel kills it
// if the harness dies.
func startProcess(dir, name, netns string, env []string, argv ...string) (*process, error) {
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	p.start = func() (*process, error) { return startProcess(dir, name, "", env, argv...) }
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id (`ip netns exec` executes the program in place).
func (p *process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig.
func (p *process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, then SIGKILL after stopGrace, and waits.
func (p *process) Stop() error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// Kill sends SIGKILL and waits.
func (p *process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Wait waits for the process to end or ctx.
func (p *process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logTail returns the last lines of the log.
func (p *process) logTail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errExited says a process ended while it should run.
func (p *process) errExited() error {
	return errors.New(p.Name + " exited; its log " + p.LogPath + " ends with:\n" + p.logTail(15))
}
