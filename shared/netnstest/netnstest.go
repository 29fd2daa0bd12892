// Package netnstest creates network namespaces for kernel tests: a "node"
// and a "pod" joined by a veth pair, more nodes linked to it, and helpers
// to run code or commands inside one. Every namespace has a unique name
// and is deleted (with the processes the test started in it) when the test
// ends, failed or not. Namespace holds the same operations without a test,
// returning errors, for programs such as the load test.
package netnstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Require skips the test unless it runs as root with every tool on PATH
// ("ip" is always required).
func Require(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kernel test: needs root to create network namespaces (run as root: sudo go test)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("kernel test: %q not on PATH (Debian packages iproute2, iptables, conntrack): %v", tool, err)
		}
	}
}

// Namespace is a named network namespace (/run/netns/<Name>) for code that
// is not a test, such as the load test's scenarios: every operation returns
// its error. NetNS wraps it for tests.
type Namespace struct {
	Name string
}

// Create creates a namespace named prefix-<random> with lo up. The caller
// deletes it with Delete.
func Create(ctx context.Context, prefix string) (Namespace, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Namespace{}, err
	}
	n := Namespace{Name: prefix + "-" + hex.EncodeToString(b[:])}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		return Namespace{}, fmt.Errorf("ip netns add %s: %w: %s", n.Name, err, out)
	}
	if _, err := n.Exec(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		return Namespace{}, errors.Join(err, n.Delete())
	}
	return n, nil
}

// Path is the namespace's bind mount.
func (n Namespace) Path() string { return "/run/netns/" + n.Name }

// Delete kills the processes left inside and deletes the namespace.
func (n Namespace) Delete() error {
	n.KillProcs()
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.Name, err, out)
	}
	return nil
}

// KillProcs kills every process inside, except this one. Only the caller's
// processes live in a namespace it created.
func (n Namespace) KillProcs() {
	for range 3 {
		out, _ := exec.Command("ip", "netns", "pids", n.Name).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Do runs fn on an OS thread that has entered the namespace. Sockets, netlink
// handles and child processes created by fn belong to the namespace;
// goroutines fn starts do not (they run on other threads). If the thread
// cannot return to its original namespace it is discarded.
func (n Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(n.Path())
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the goroutine exits locked and Go retires the thread
		errc <- err
	}()
	return <-errc
}

// Command returns `ip netns exec <ns> name args...`.
func (n Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Exec runs a command in the namespace and returns its combined output; the
// error carries the output too.
func (n Namespace) Exec(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := n.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, strings.TrimSpace(out.String()))
	}
	return out.String(), err
}

// NetNS is a Namespace owned by a test.
type NetNS struct {
	Namespace
	t testing.TB
}

// New creates a namespace named prefix-<random>, with lo up, and deletes it
// when the test ends after killing every process still running in it.
func New(t testing.TB, prefix string) *NetNS {
	t.Helper()
	ns, err := Create(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	n := &NetNS{Namespace: ns, t: t}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// Exec runs a command in the namespace, giving up after 30 seconds, and
// returns its combined output.
func (n *NetNS) Exec(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Namespace.Exec(ctx, name, args...)
}

// Run is Exec that fails the test on error.
func (n *NetNS) Run(name string, args ...string) string {
	n.t.Helper()
	out, err := n.Exec(name, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// Start starts a long-running command in the namespace with its output
// going to the test log; the test's cleanup kills it.
func (n *NetNS) Start(name string, args ...string) *exec.Cmd {
	n.t.Helper()
	cmd := n.Command(context.Background(), name, args...)
	w := &logWriter{t: n.t, prefix: n.Name + " " + name + ": "}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start %s in %s: %v", name, n.Name, err)
	}
	n.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Sysctl sets a sysctl inside the namespace.
func (n *NetNS) Sysctl(key, value string) {
	n.t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if err := n.Do(func() error { return os.WriteFile(path, []byte(value), 0o644) }); err != nil {
		n.t.Fatalf("sysctl %s=%s in %s: %v", key, value, n.Name, err)
	}
}

type logWriter struct {
	t      testing.TB
	prefix string
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}
