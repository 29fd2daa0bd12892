package scenario

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// netNS is a named network namespace (`ip netns`) this package created.
type netNS struct {
	Name string
}

// newNetNS creates prefix-<random> with lo up.
func newNetNS(ctx context.Context, prefix string) (*netNS, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	n := &netNS{Name: prefix + "-" + hex.EncodeToString(b[:])}
	if _, err := run(ctx, "ip", "netns", "add", n.Name); err != nil {
		return nil, err
	}
	if _, err := n.Exec(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		return nil, errors.Join(err, n.Delete())
	}
	return n, nil
}

// Delete kills the processes left inside and deletes the namespace.
func (n *netNS) Delete() error {
	killNetnsProcs(n.Name)
	_, err := run(context.Background(), "ip", "netns", "del", n.Name)
	return err
}

// killNetnsProcs kills every process in netns ns: only ones this package
// started live in namespaces it created.
func killNetnsProcs(ns string) {
	for range 3 {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
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

// Command returns `ip netns exec NAME name args...`.
func (n *netNS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Exec runs a command inside and returns its combined output.
func (n *netNS) Exec(ctx context.Context, name string, args ...string) (string, error) {
	return run(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs fn on an OS thread inside the namespace; sockets fn creates
// stay in it.
func (n *netNS) Do(fn func() error) error {
	return doInNetns(n.Name, fn)
}

func doInNetns(name string, fn func() error) error {
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
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread exits with the goroutine and Go retires it
		errc <- err
	}()
	return <-errc
}

// dialer returns a DialContext that opens connections inside netns name.
func dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = doInNetns(name, func() error {
			d := net.Dialer{Timeout: 3 * time.Second}
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// run runs a command and returns its combined output; the error carries
// the output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
