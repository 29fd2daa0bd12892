package scenario

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/nodedns/nodedns/shared/netnstest"
)

// inNetns is the namespace named name, created by this package or by the
// testbed.
func inNetns(name string) netnstest.Namespace { return netnstest.Namespace{Name: name} }

// dialer returns a DialContext that opens connections inside netns name.
func dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = inNetns(name).Do(func() error {
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
