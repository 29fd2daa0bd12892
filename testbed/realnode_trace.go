package testbed

import (
	"context"
	"os/exec"
)

// Command returns a command that runs name in the node's namespaces, for
// a caller that streams its output (conntrack -E, tcpdump) until ctx ends.
func (n *RealNode) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(n.nsenter(), name)
	argv = append(argv, args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}
