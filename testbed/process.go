package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// stopGrace is how long a process gets to exit after SIGTERM before SIGKILL:
// kube-apiserver drains in a few seconds; etcd exits at once.
const stopGrace = 10 * time.Second

// Process is a child process (etcd, kube-apiserver, kube-proxy, or a
// study's agents) in its own process group, whose stdout and stderr go to
// <dir>/<name>.log.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // exit status; valid after done is closed
}

// StartProcess starts argv in dir, in its own process group, with env added
// to this process's environment. The child is killed when the starting
// thread dies, so a crashed test leaves nothing behind.
func StartProcess(dir, name string, argv, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer f.Close() // the child holds its own copy
	fmt.Fprintf(f, "=== %s: %q\n", time.Now().Format(time.RFC3339Nano), argv)

	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process id of the child.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, with its status.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after stopGrace, and
// waits until the process is reaped. Safe to call more than once.
func (p *Process) Stop() error {
	if done, _ := p.Exited(); done {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s: %w", p.name, err)
		}
		<-p.done
	}
	// Children that left the group leader behind (ip netns exec forks none,
	// but be thorough) go with the group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// LogTail returns the end of the process log, for error messages.
func (p *Process) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", p.logPath, err)
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s", p.logPath, tail(b, 6000))
}
