package upstream

import (
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawIO reads and writes a pooled connection with raw system calls on its
// non-blocking descriptor, waiting in the runtime poller when the kernel
// has nothing (EAGAIN): the connection's deadlines still apply. A read or
// write that cannot block needs none of the runtime's system call
// bookkeeping (entersyscall), which on a mostly idle frontend woke its
// sysmon thread for nearly every miss: a context switch on another CPU
// per system call of the miss path.
type rawIO struct {
	rc syscall.RawConn

	// Arguments and results of the callbacks, which are built once so
	// that a read or write allocates nothing.
	p       []byte
	n       int
	errno   syscall.Errno
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

func newRawIO(rc syscall.RawConn) *rawIO {
	r := &rawIO{rc: rc}
	r.readFn, r.writeFn = r.read, r.write
	return r
}

func (r *rawIO) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.n, r.errno = int(n), e
		return true
	}
}

func (r *rawIO) write(fd uintptr) bool {
	for len(r.p) > 0 {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case 0:
			r.n += int(n)
			r.p = r.p[n:]
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			r.errno = e
			return true
		}
	}
	return true
}

// Read implements io.Reader.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Read(r.readFn)
	r.p = nil
	switch {
	case err != nil:
		return 0, err
	case r.errno != 0:
		return 0, r.errno
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

// Write implements io.Writer: all of p, or an error.
func (r *rawIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Write(r.writeFn)
	r.p = nil
	switch {
	case err != nil:
		return r.n, err
	case r.errno != 0:
		return r.n, r.errno
	}
	return r.n, nil
}
