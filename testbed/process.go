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

// process is one child (etcd, kube-apiserver, kube-proxy) whose stdout and
// stderr go to <dir>/<name>.log.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // exit status; valid after done is closed
}

// startProcess starts argv in its own process group. The child is killed
// when the starting thread dies, so a crashed test leaves nothing behind.
func startProcess(dir, name string, argv []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer f.Close() // the child holds its own copy
	fmt.Fprintf(f, "=== %s: %q\n", time.Now().Format(time.RFC3339Nano), argv)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id of the running child.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited, with its status.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace, and
// waits until the process is reaped. Safe to call more than once.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
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

// logTail returns the end of the process log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", p.logPath, err)
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s", p.logPath, tail(b, 6000))
}
