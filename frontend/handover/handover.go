// Package handover passes a running frontend's sockets to a newer instance
// over a unix socket (SCM_RIGHTS, through package fdpass), so that an
// upgrade loses no query: the kernel keeps queueing datagrams on the very
// same sockets while the old instance stops reading and the new one starts.
//
// Protocol, over a SOCK_SEQPACKET connection to <dir>/frontend.sock:
//
//	new → old  "hello <listen,addrs>"   the successor's --listen
//	old → new  "files" + up to 64 fds   repeated
//	old → new  "end <n>"                n fds sent in all
//	           (or "refuse <reason>" and close: a different --listen)
//	new → old  "ready"                  the successor serves the sockets
//	old → new  "done"                   the old one has drained and exits
//
// The old instance exits without tearing the node network down: its
// successor owns it. If the successor disconnects before "ready", the old
// instance keeps serving as if nothing happened.
package handover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/frontend/internal/fdpass"
)

// SocketName is the name of the unix socket in the handover directory.
const SocketName = "frontend.sock"

// ErrRefused is returned by Receive when the running instance serves other
// addresses: it is not this instance's predecessor.
var ErrRefused = errors.New("handover refused")

// Path returns the socket path in dir.
func Path(dir string) string { return filepath.Join(dir, SocketName) }

// Donor is what the old instance hands over: its sockets.
type Donor interface {
	// Files returns duplicates of the sockets; the caller closes them.
	Files() ([]*os.File, error)
}

// Listener waits for a successor on the handover socket.
type Listener struct {
	l      *net.UnixListener
	listen string // this instance's --listen, as sent in "hello"
	log    *zap.Logger
}

// Listen binds the handover socket in dir (created 0700 if missing),
// replacing any socket file left there: a predecessor that is still running
// keeps its listener but is no longer reachable by path. listen is this
// instance's listen addresses; only a successor with the same ones is served.
func Listen(dir string, listen []string, log *zap.Logger) (*Listener, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("handover dir: %w", err)
	}
	path := Path(dir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	// Close must not unlink the path: by then it may be the successor's.
	l.SetUnlinkOnClose(false)
	return &Listener{l: l, listen: joinAddrs(listen), log: log}, nil
}

// Close stops listening.
func (l *Listener) Close() error { return l.l.Close() }

// Handover is an accepted successor that said "ready": the old instance now
// stops reading, drains, and calls Done.
type Handover struct {
	c *net.UnixConn
}

// Done tells the successor that the old instance has drained, and closes.
func (h *Handover) Done() error {
	_, err := h.c.Write([]byte("done"))
	return errors.Join(err, h.c.Close())
}

// Accept serves successors until one is ready to take the sockets over, and
// returns it. A successor that fails halfway is logged and forgotten. It
// returns ctx's error when ctx ends, or the listener's when it is closed.
func (l *Listener) Accept(ctx context.Context, d Donor) (*Handover, error) {
	stop := context.AfterFunc(ctx, func() { _ = l.l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		c, err := l.l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("handover accept: %w", err)
		}
		h, err := l.give(c, d)
		if err != nil {
			_ = c.Close()
			l.log.Warn("handover to a successor failed; still serving", zap.Error(err))
			continue
		}
		return h, nil
	}
}

// handshakeTimeout bounds the exchange up to "ready": the successor binds
// nothing new, so it is ready within milliseconds.
const handshakeTimeout = 10 * time.Second

func (l *Listener) give(c *net.UnixConn, d Donor) (*Handover, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	msg, _, err := fdpass.Read(c, 0)
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	theirs, ok := strings.CutPrefix(msg, "hello ")
	if !ok {
		return nil, fmt.Errorf("unexpected %q", msg)
	}
	if theirs != l.listen {
		_, _ = c.Write([]byte("refuse listening on " + l.listen))
		return nil, fmt.Errorf("successor listens on %s, this instance on %s", theirs, l.listen)
	}
	files, err := d.Files()
	if err != nil {
		_, _ = c.Write([]byte("refuse " + err.Error()))
		return nil, err
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	fds, err := fdpass.FDs(files)
	if err != nil {
		return nil, err
	}
	if err := fdpass.Send(c, fds); err != nil {
		return nil, err
	}
	msg, _, err = fdpass.Read(c, 0)
	if err != nil {
		return nil, fmt.Errorf("wait for ready: %w", err)
	}
	if msg != "ready" {
		return nil, fmt.Errorf("unexpected %q", msg)
	}
	_ = c.SetDeadline(time.Time{})
	return &Handover{c: c}, nil
}

// Successor is the new instance's side of a handover in progress.
type Successor struct {
	c *net.UnixConn
}

// Receive asks the instance listening in dir for its sockets. With no
// instance there it returns nil, nil, nil: start from scratch. listen is
// this instance's listen addresses; a predecessor with other ones refuses
// (ErrRefused). On success the caller serves the files (it owns them), then
// calls Ready.
func Receive(ctx context.Context, dir string, listen []string) (*Successor, []*os.File, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", Path(dir))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("handover: %w", err)
	}
	c := conn.(*net.UnixConn)
	deadline := time.Now().Add(handshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	var files []*os.File
	fail := func(err error) (*Successor, []*os.File, error) {
		for _, f := range files {
			_ = f.Close()
		}
		_ = c.Close()
		return nil, nil, err
	}
	if _, err := c.Write([]byte("hello " + joinAddrs(listen))); err != nil {
		return fail(fmt.Errorf("handover hello: %w", err))
	}
	msg, fds, err := fdpass.Read(c, fdpass.MaxFDs)
	if err != nil {
		return fail(fmt.Errorf("handover receive: %w", err))
	}
	if reason, ok := strings.CutPrefix(msg, "refuse "); ok {
		fdpass.Close(fds)
		return fail(fmt.Errorf("%w: %s", ErrRefused, reason))
	}
	fds, err = fdpass.ReceiveRest(c, msg, fds)
	if err != nil {
		return fail(fmt.Errorf("handover receive: %w", err))
	}
	for _, fd := range fds {
		files = append(files, os.NewFile(uintptr(fd), "inherited"))
	}
	_ = c.SetDeadline(time.Time{})
	return &Successor{c: c}, files, nil
}

// Ready tells the predecessor that this instance serves the sockets: it
// stops reading and drains.
func (s *Successor) Ready() error {
	if _, err := s.c.Write([]byte("ready")); err != nil {
		_ = s.c.Close()
		return fmt.Errorf("handover ready: %w", err)
	}
	return nil
}

// Wait waits until the predecessor has drained (or ctx ends), and closes.
func (s *Successor) Wait(ctx context.Context) error {
	defer s.c.Close()
	stop := context.AfterFunc(ctx, func() { _ = s.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, _, err := fdpass.Read(s.c, 0)
	if err != nil {
		return fmt.Errorf("handover wait: %w", err)
	}
	if msg != "done" {
		return fmt.Errorf("handover: unexpected %q", msg)
	}
	return nil
}

// Abort closes the connection without "ready": the predecessor keeps
// serving.
func (s *Successor) Abort() error { return s.c.Close() }

func joinAddrs(addrs []string) string { return strings.Join(addrs, ",") }
