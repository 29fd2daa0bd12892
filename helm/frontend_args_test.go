package helm

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFrontendAcceptsRenderedArgs starts the real nodedns-frontend with the
// command line kubelet would give it in each mode, inside a private network
// namespace (unshare --net, gone when the process exits) with lo up as on a
// node (the health listener binds the probe address, in 127.0.0.0/8), and
// fails if it rejects its flags (exit status 2) or exits. The backend is
// absent there, so the frontend binds its listeners and waits for it
// without touching any rule; --handover-dir is pointed at a temporary
// directory so nothing lands in the host's /run/nodedns.
func TestFrontendAcceptsRenderedArgs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the frontend runs in a private network namespace (unshare --net)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found")
	}
	if testing.Short() {
		t.Skip("-short: not building nodedns-frontend")
	}
	bin := imageBinary(t, "nodedns-frontend")
	for _, tc := range []struct {
		values   string
		rejected bool
	}{
		{"mode: iptables", false},
		{"mode: link-local", false},
		{"mode: node-ip", false},
		{"localIP: 169.254.20.10,fd00::10", false},
		{"probeAddress: 127.53.0.9", false},
		{`probeAddress: ""`, false},
		// The check itself: a flag the frontend does not know.
		{"frontend: {extraArgs: [--no-such-flag=1]}", true},
	} {
		values := tc.values
		t.Run(values, func(t *testing.T) {
			vals, err := ParseValues(values)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := NodeContainers(vals, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
			if err != nil {
				t.Fatal(err)
			}
			fe := cs[slices.IndexFunc(cs, func(c Container) bool { return c.Spec.Name == "frontend" })]
			args := append([]string{"--net", "--", "sh", "-c", `ip link set lo up && ip addr add 192.0.2.7/32 dev lo && exec "$0" "$@"`, bin}, fe.Command[1:]...)
			args = append(args, "--handover-dir="+t.TempDir())
			cmd := exec.Command(unshare, args...)
			// The image's PATH, which holds iptables-legacy and iptables-nft.
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, fe.Env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if tc.rejected {
					if cmd.ProcessState.ExitCode() != 2 {
						t.Errorf("exit %v, want status 2 for a bad flag", err)
					}
					return
				}
				t.Fatalf("nodedns-frontend %s exited: %v\n%s", strings.Join(fe.Command[1:], " "), err, stderr.String())
			case <-time.After(2 * time.Second):
				if tc.rejected {
					t.Errorf("a bad flag was accepted")
				}
				// Still running: the flags were accepted and it is waiting
				// for the backend.
			}
			if p := fe.Spec.LivenessProbe.HTTPGet; !tc.rejected && !listening(t, cmd.Process.Pid, p.Host, p.Port.IntValue()) {
				t.Errorf("no listener on %s:%d, where the liveness probe goes (/proc/%d/net/tcp)", p.Host, p.Port.IntValue(), cmd.Process.Pid)
			}
			// NOTES.txt runs diagnose with the running frontend's flags
			// (/proc/1/cmdline): it must accept every one of them. Checks
			// fail in an empty netns (status 1); bad flags are status 2.
			diag := exec.Command(unshare, append([]string{"--net", "--", bin, "diagnose", "--timeout=200ms"}, fe.Command[1:]...)...)
			diag.Env = cmd.Env
			out, err := diag.CombinedOutput()
			if diag.ProcessState == nil || diag.ProcessState.ExitCode() == 2 {
				t.Errorf("diagnose with the frontend's flags: %v\n%s", err, out)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if strings.Contains(stderr.String(), "-h lists the flags") {
				t.Errorf("flags rejected:\n%s", stderr.String())
			}
		})
	}
}

// listening reports whether a TCP socket listens on host:port in the
// network namespace of process pid, from its /proc/PID/net/tcp; host ""
// means every address, which Go binds as [::] (/proc/PID/net/tcp6).
func listening(t *testing.T, pid int, host string, port int) bool {
	t.Helper()
	table, local := "tcp6", fmt.Sprintf("%032X:%04X", 0, port)
	if host != "" {
		ip := net.ParseIP(host).To4()
		if ip == nil {
			t.Fatalf("probe host %q is not IPv4", host)
		}
		// The IPv4 address as a host-order (little-endian here) hex word.
		table, local = "tcp", fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], port)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 3 && f[1] == local && f[3] == "0A" { // 0A: LISTEN
			return true
		}
	}
	return false
}
