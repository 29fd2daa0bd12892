package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenConfig returns a net.ListenConfig whose sockets set SO_REUSEPORT
// (several UDP sockets per address, and a newer instance binding next to an
// older one during an upgrade) and, when freeBind holds, IP_FREEBIND.
func listenConfig(freeBind bool) *net.ListenConfig {
	return &net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
				serr = fmt.Errorf("set SO_REUSEPORT: %w", serr)
				return
			}
			if !freeBind {
				return
			}
			if network == "udp6" || network == "tcp6" {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			}
			if serr != nil {
				serr = fmt.Errorf("set FREEBIND: %w", serr)
			}
		})
		return errors.Join(err, serr)
	}}
}

// ListenReusePort listens on a TCP address with SO_REUSEPORT, so that two
// instances of a process (a surge upgrade) can both bind it. The metrics
// and health HTTP servers use it.
func ListenReusePort(ctx context.Context, addr string) (net.Listener, error) {
	l, err := listenConfig(false).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

func family(ip net.IP, proto string) string {
	if ip.To4() != nil {
		return proto + "4"
	}
	return proto + "6"
}

// socketType returns SO_TYPE of f (unix.SOCK_DGRAM or unix.SOCK_STREAM)
// without calling f.Fd, which would switch the socket to blocking mode.
func socketType(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var typ int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		typ, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
	}); err != nil {
		return 0, err
	}
	return typ, serr
}
