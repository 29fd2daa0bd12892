package fdpass

import (
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pair returns both ends of a unixpacket socket pair, closed with the test.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	return conns[0], conns[1]
}

// pipeSent sends the write end of a new pipe in one message of payload
// (SCM_RIGHTS; an empty payload is sent as it is) and closes this process's copy. It returns the read end: it reads
// EOF once the copy the receiver got is closed too.
func pipeSent(t *testing.T, from *net.UnixConn, payload []byte) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rc, err := from.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = sendmsg(int(fd), payload, unix.UnixRights(int(w.Fd())))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("sendmsg: %v", serr)
	}
	w.Close()
	return r
}

// sendmsg is sendmsg(2) with no iovec when p is empty: unix.Sendmsg adds
// a byte of its own then, and Go's net package never sends an empty
// message with control data, but a peer in another language may.
func sendmsg(fd int, p, oob []byte) error {
	var msg unix.Msghdr
	if len(p) > 0 {
		iov := unix.Iovec{Base: &p[0]}
		iov.SetLen(len(p))
		msg.Iov, msg.Iovlen = &iov, 1
	}
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
	_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	runtime.KeepAlive(p)
	runtime.KeepAlive(oob)
	if errno != 0 {
		return errno
	}
	return nil
}

// writerClosed reports whether every write end of the pipe read by r is
// closed: a read then returns EOF instead of waiting.
func writerClosed(t *testing.T, r *os.File) bool {
	t.Helper()
	_ = r.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := r.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestReadClosesDescriptorsItDoesNotReturn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		maxFDs  int
		wantErr error // nil: any error
	}{
		// A zero-length message is what a closed peer reads as; Go reports
		// it as io.EOF even when it carried descriptors.
		{name: "zero-length message", payload: "", maxFDs: MaxFDs, wantErr: ErrClosed},
		{name: "more descriptors than wanted", payload: "files", maxFDs: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			r := pipeSent(t, a, []byte(tc.payload))
			msg, fds, err := Read(b, tc.maxFDs)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Read = %q, %v, %v; want error %v", msg, fds, err, tc.wantErr)
			}
			if fds != nil {
				t.Errorf("Read returned descriptors %v with its error", fds)
			}
			if !writerClosed(t, r) {
				t.Error("the descriptor received is still open in this process")
			}
		})
	}
}

func TestReadReturnsDescriptors(t *testing.T) {
	a, b := pair(t)
	r := pipeSent(t, a, []byte("files"))
	msg, fds, err := Read(b, MaxFDs)
	if err != nil || msg != "files" || len(fds) != 1 {
		t.Fatalf("Read = %q, %v, %v; want \"files\" and one descriptor", msg, fds, err)
	}
	if writerClosed(t, r) {
		t.Fatal("the descriptor returned is closed")
	}
	Close(fds)
	if !writerClosed(t, r) {
		t.Error("Close left the descriptor open")
	}
}

func TestReadPeerClosed(t *testing.T) {
	a, b := pair(t)
	a.Close()
	if _, _, err := Read(b, MaxFDs); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after the peer closed: %v, want ErrClosed", err)
	}
}

func TestSendReceive(t *testing.T) {
	for _, n := range []int{0, 1, MaxFDs, MaxFDs + 1, 2*MaxFDs + 3} {
		a, b := pair(t)
		files := make([]*os.File, n)
		for i := range files {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files[i] = f
		}
		fds, err := FDs(files)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- Send(a, fds) }()
		got, err := Receive(b)
		if err != nil {
			t.Fatalf("%d descriptors: Receive: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%d descriptors: Send: %v", n, err)
		}
		if len(got) != n {
			t.Errorf("%d descriptors sent, %d received", n, len(got))
		}
		Close(got)
	}
}

func TestReceiveRestRejects(t *testing.T) {
	for _, tc := range []struct{ name, last string }{
		{"count not the one sent", "end 2"},
		{"unknown message", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			r := pipeSent(t, a, []byte("files"))
			if _, err := a.Write([]byte(tc.last)); err != nil {
				t.Fatal(err)
			}
			got, err := Receive(b)
			if err == nil {
				Close(got)
				t.Fatalf("Receive after %q: no error", tc.last)
			}
			if !writerClosed(t, r) {
				t.Error("the descriptor received is still open after the error")
			}
		})
	}
}
