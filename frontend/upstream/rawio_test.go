package upstream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func rawPair(t *testing.T) (*rawIO, net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return newRawIO(rc), c, peer
}

// TestRawIO: what a pooled connection's reads and writes must do: all of
// a large write arrives (the kernel takes it in parts, waiting for room),
// reads wait for data, a closed peer is io.EOF, the connection's deadline
// ends a read with os.ErrDeadlineExceeded, and neither allocates.
func TestRawIO(t *testing.T) {
	rio, c, peer := rawPair(t)

	big := bytes.Repeat([]byte("nodedns."), 1<<20) // 8 MiB: more than the socket buffers
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	if n, err := rio.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(big))
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer read %d bytes, not what was written", len(b))
	}

	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = peer.Write([]byte("answer"))
	}()
	buf := make([]byte, 16)
	if n, err := io.ReadFull(rio, buf[:6]); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}

	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := rio.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) || Reason(err) != ReasonTimeout {
		t.Fatalf("Read past the deadline: %v (reason %s); want os.ErrDeadlineExceeded, %s", err, Reason(err), ReasonTimeout)
	}
	_ = c.SetReadDeadline(time.Time{})

	x := []byte("x")
	if a := testing.AllocsPerRun(100, func() {
		if _, err := rio.Write(x); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Read(buf); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Write allocates %.0f times", a)
	}

	peer.Close()
	if _, err := rio.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the peer closed: %v, want io.EOF", err)
	}
}
