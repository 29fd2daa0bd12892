// Package fdpass passes file descriptors between processes over a
// unixpacket connection (SCM_RIGHTS, unix(7)): the one wrapper of
// unix.UnixRights and unix.ParseUnixRights that the socket holder and the
// handover go through. A set of descriptors travels as "files" messages,
// each carrying at most MaxFDs, then "end <n>" with the count sent.
//
// Every descriptor the kernel installs in this process is either returned
// to the caller or closed here, whatever the error: a message that was
// dropped would otherwise leak sockets that keep the node's DNS ports
// bound.
package fdpass

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxFDs is the most descriptors Send puts in one message and Read and
// Receive accept in one: well below the kernel's SCM_MAX_FD (253).
const MaxFDs = 64

// MaxMessage bounds one message of the protocols that use this package
// (listen lists included).
const MaxMessage = 4096

// ErrClosed is Read's error when the peer closed the connection.
var ErrClosed = errors.New("connection closed")

// Read reads one message and the descriptors sent with it, at most maxFDs
// (more are an error). The descriptors stay plain integers: wrapping one in
// an os.File would register it with this process's poller, which would
// then wake up for every datagram that arrives on a socket a holder never
// reads.
//
// On any error no descriptor is returned: those received are closed. That
// includes a zero-length read, which Go reports as io.EOF on a unixpacket
// connection even when the message carried descriptors: it is ErrClosed.
func Read(c *net.UnixConn, maxFDs int) (string, []int, error) {
	buf := make([]byte, MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*max(maxFDs, 1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	fds, perr := parseRights(oob[:max(oobn, 0)])
	switch {
	case n == 0 && (err == nil || errors.Is(err, io.EOF)):
		err = ErrClosed
	case err != nil:
	case perr != nil:
		err = fmt.Errorf("control message: %w", perr)
	case flags&unix.MSG_CTRUNC != 0 || len(fds) > maxFDs:
		err = fmt.Errorf("more than %d file descriptors in one message", maxFDs)
	}
	if err != nil {
		Close(fds)
		return "", nil, err
	}
	return string(buf[:n]), fds, nil
}

// parseRights returns the descriptors of every SCM_RIGHTS message in oob,
// as many as could be parsed, and the first parse error.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, cm := range cmsgs {
		if cm.Header.Level != unix.SOL_SOCKET || cm.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&cm)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Send sends fds in "files" messages of at most MaxFDs each, then
// "end <n>". The caller keeps its own descriptors open.
func Send(c *net.UnixConn, fds []int) error {
	for i := 0; i < len(fds); i += MaxFDs {
		chunk := fds[i:min(i+MaxFDs, len(fds))]
		if _, _, err := c.WriteMsgUnix([]byte("files"), unix.UnixRights(chunk...), nil); err != nil {
			return fmt.Errorf("send sockets: %w", err)
		}
	}
	if _, err := c.Write([]byte("end " + strconv.Itoa(len(fds)))); err != nil {
		return fmt.Errorf("send end: %w", err)
	}
	return nil
}

// Receive reads what Send sent and returns the descriptors, which the
// caller then owns. On error every descriptor received is closed.
func Receive(c *net.UnixConn) ([]int, error) {
	msg, fds, err := Read(c, MaxFDs)
	if err != nil {
		return nil, err
	}
	return ReceiveRest(c, msg, fds)
}

// ReceiveRest is Receive for a caller that already read the first message,
// msg, with fds: it reads on up to "end <n>".
func ReceiveRest(c *net.UnixConn, msg string, fds []int) ([]int, error) {
	for {
		switch {
		case msg == "files":
		case strings.HasPrefix(msg, "end "):
			if n, err := strconv.Atoi(msg[len("end "):]); err != nil || n != len(fds) {
				Close(fds)
				return nil, fmt.Errorf("%q announced, %d sockets received", msg, len(fds))
			}
			return fds, nil
		default:
			Close(fds)
			return nil, fmt.Errorf("unexpected %q", msg)
		}
		var got []int
		var err error
		msg, got, err = Read(c, MaxFDs)
		fds = append(fds, got...)
		if err != nil {
			Close(fds)
			return nil, err
		}
	}
}

// Close closes every descriptor of fds.
func Close(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// FDs returns the descriptors of files without f.Fd, which would switch a
// socket shared with the running server to blocking mode. They stay
// owned by files.
func FDs(files []*os.File) ([]int, error) {
	fds := make([]int, 0, len(files))
	for _, f := range files {
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("socket %s: %w", f.Name(), err)
		}
		var fd int
		if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
			return nil, fmt.Errorf("socket %s: %w", f.Name(), err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}
