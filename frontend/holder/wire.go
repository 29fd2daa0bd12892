package holder

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

// maxFDsPerMessage stays well below the kernel's SCM_MAX_FD (253).
const maxFDsPerMessage = 64

// maxMessage bounds one protocol message (listen lists included).
const maxMessage = 4096

// errClosed is readMsg's error when the peer closed the connection.
var errClosed = errors.New("connection closed")

// readMsg reads one message and the descriptors sent with it (at most
// maxFDs; more are closed and reported as an error). The descriptors stay
// plain integers: wrapping one in an os.File would register it with this
// process's poller, which would then wake up for every datagram that
// arrives on a socket the holder never reads.
func readMsg(c *net.UnixConn, maxFDs int) (string, []int, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*max(maxFDs, 1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if errors.Is(err, io.EOF) {
		return "", nil, errClosed
	}
	if err != nil {
		return "", nil, err
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return "", nil, fmt.Errorf("control message: %w", err)
		}
		for _, cm := range cmsgs {
			if got, err := unix.ParseUnixRights(&cm); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 || len(fds) > maxFDs {
		closeFDs(fds)
		return "", nil, errors.New("too many file descriptors in one message")
	}
	if n == 0 {
		closeFDs(fds)
		return "", nil, errClosed
	}
	return string(buf[:n]), fds, nil
}

// sendFDs sends fds in "files" messages, then "end <n>".
func sendFDs(c *net.UnixConn, fds []int) error {
	for i := 0; i < len(fds); i += maxFDsPerMessage {
		chunk := fds[i:min(i+maxFDsPerMessage, len(fds))]
		if _, _, err := c.WriteMsgUnix([]byte("files"), unix.UnixRights(chunk...), nil); err != nil {
			return fmt.Errorf("send sockets: %w", err)
		}
	}
	if _, err := c.Write([]byte("end " + strconv.Itoa(len(fds)))); err != nil {
		return fmt.Errorf("send end: %w", err)
	}
	return nil
}

// recvFDs reads "files" messages up to "end <n>" and returns the
// descriptors. On error every descriptor received is closed.
func recvFDs(c *net.UnixConn) ([]int, error) {
	msg, fds, err := readMsg(c, maxFDsPerMessage)
	if err != nil {
		return nil, err
	}
	return recvRest(c, msg, fds)
}

// recvRest goes on from msg, already read with fds, up to "end <n>".
func recvRest(c *net.UnixConn, msg string, fds []int) ([]int, error) {
	for {
		switch {
		case msg == "files":
		case strings.HasPrefix(msg, "end "):
			if n, err := strconv.Atoi(msg[4:]); err != nil || n != len(fds) {
				closeFDs(fds)
				return nil, fmt.Errorf("%q announced, %d sockets received", msg, len(fds))
			}
			return fds, nil
		default:
			closeFDs(fds)
			return nil, fmt.Errorf("unexpected %q", msg)
		}
		var got []int
		var err error
		msg, got, err = readMsg(c, maxFDsPerMessage)
		fds = append(fds, got...)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// fdsOf returns the descriptors of files without f.Fd, which would switch
// a socket shared with the running server to blocking mode.
func fdsOf(files []*os.File) ([]int, error) {
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
