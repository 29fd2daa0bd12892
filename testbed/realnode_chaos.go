package testbed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ContainerPID returns the host PID of a container's init process on this
// node, from containerd's task list. id is a container ID as pod status
// gives it, with or without the "containerd://" prefix.
func (n *RealNode) ContainerPID(ctx context.Context, id string) (int, error) {
	id = strings.TrimPrefix(id, "containerd://")
	out, err := n.ctr(ctx, "tasks", "ls")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("container %s: no running task on node %s", id, n.Name)
}

// KillContainer sends SIGKILL to a container's init process, as a crash
// would: containerd reports the exit and kubelet restarts the container
// by the pod's restart policy.
func (n *RealNode) KillContainer(ctx context.Context, id string) error {
	pid, err := n.ContainerPID(ctx, id)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill container %s (pid %d): %w", id, pid, err)
	}
	return nil
}

// ExecContainer runs argv in a running container of this node, as
// `kubectl exec` would through the runtime (`ctr task exec`), and returns
// its combined output. id is a container ID as pod status gives it.
func (n *RealNode) ExecContainer(ctx context.Context, id string, argv ...string) ([]byte, error) {
	id = strings.TrimPrefix(id, "containerd://")
	execID := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	return n.ctr(ctx, append([]string{"tasks", "exec", "--exec-id", execID, id}, argv...)...)
}

// ListenPacket opens a UDP socket on addr in this node's network
// namespace, as a process of the node (hostNetwork) would: a test sends
// queries through it to the node's DNS, e.g. to flood the frontend's cache.
func (n *RealNode) ListenPacket(addr string) (net.PacketConn, error) {
	return listenPacketInNetns(n.Netns, addr)
}
