package holder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/frontend/internal/fdpass"
)

// ErrBusy is returned by Take when another frontend holds the holder's
// lease: it serves the sockets, and this one must get them from it (the
// handover) or bind its own.
var ErrBusy = errors.New("the holder serves another frontend")

// retryInterval is how often a frontend without a lease dials the holder
// again: a restarted holder is supplied within it, and an unread copy
// left in a SO_REUSEPORT group is closed within it.
const retryInterval = 250 * time.Millisecond

// Donor is what the frontend gives the holder: its sockets.
type Donor interface {
	// Files returns duplicates of the sockets; the caller closes them.
	Files() ([]*os.File, error)
}

// Supplier is the frontend's side: it takes the held sockets back at
// start, then keeps the holder supplied with the sockets it serves.
type Supplier struct {
	dir    string
	listen string // as sent in "hello"
	log    *zap.Logger

	release chan struct{} // closed by Release
	once    sync.Once
	done    chan struct{} // closed when Run returns
	mu      sync.Mutex    // guards conn and runErr
	conn    *net.UnixConn // the lease, or nil
	started bool          // Run was called
	runErr  error         // of the release, set when Run returns
}

// NewSupplier returns a Supplier for the holder in dir, for a frontend
// serving listen.
func NewSupplier(dir string, listen []string, log *zap.Logger) *Supplier {
	if log == nil {
		log = zap.NewNop()
	}
	return &Supplier{
		dir: dir, listen: strings.Join(listen, ","), log: log,
		release: make(chan struct{}), done: make(chan struct{}),
	}
}

// Take asks the holder for the sockets it holds, and takes its lease. With
// no holder it returns nil, nil: Run supplies it once it is up. The
// caller owns the files (none when the holder holds nothing).
func (s *Supplier) Take(ctx context.Context) ([]*os.File, error) {
	c, fds, err := s.hello(ctx)
	if err != nil || c == nil {
		return nil, err
	}
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "held")
	}
	return files, nil
}

// hello dials the holder and takes its lease: the connection and the
// sockets it offered. A nil connection without error means no holder.
func (s *Supplier) hello(ctx context.Context) (*net.UnixConn, []int, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", Path(s.dir))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("holder: %w", err)
	}
	c := conn.(*net.UnixConn)
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	fail := func(err error) (*net.UnixConn, []int, error) {
		_ = c.Close()
		return nil, nil, err
	}
	if _, err := c.Write([]byte("hello " + s.listen)); err != nil {
		return fail(fmt.Errorf("holder hello: %w", err))
	}
	msg, fds, err := fdpass.Read(c, fdpass.MaxFDs)
	if err != nil {
		return fail(fmt.Errorf("holder: %w", err))
	}
	if msg == "busy" {
		fdpass.Close(fds)
		return fail(ErrBusy)
	}
	fds, err = fdpass.ReceiveRest(c, msg, fds)
	if err != nil {
		return fail(fmt.Errorf("holder: %w", err))
	}
	_ = c.SetDeadline(time.Time{})
	return c, fds, nil
}

// Run keeps the holder supplied with d's sockets until ctx ends or Release
// is called: it gives them now, and again to a holder that restarted (it
// dials every retryInterval while it has no lease). Sockets a holder
// offers once this frontend serves are closed: they are the copies of
// another instance, and the ones given replace them.
func (s *Supplier) Run(ctx context.Context, d Donor) {
	s.mu.Lock()
	s.started = true
	c := s.conn
	s.mu.Unlock()
	defer close(s.done)
	for {
		if c == nil {
			var fds []int
			var err error
			c, fds, err = s.hello(ctx)
			fdpass.Close(fds)
			if err != nil && !errors.Is(err, ErrBusy) {
				s.log.Debug("holder", zap.Error(err))
			}
		}
		if c != nil {
			s.setConn(c)
			if err := s.give(c, d); err != nil {
				s.log.Warn("sockets not given to the holder", zap.Error(err))
			} else {
				s.log.Info("the holder keeps this instance's sockets for a restart")
				s.wait(ctx, c)
			}
			if s.releasing() {
				s.finish(c)
				return
			}
			s.setConn(nil)
			_ = c.Close()
			c = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-s.release:
			s.finish(nil)
			return
		case <-time.After(retryInterval):
		}
	}
}

func (s *Supplier) setConn(c *net.UnixConn) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
}

// give sends d's sockets and waits for the holder's "held".
func (s *Supplier) give(c *net.UnixConn, d Donor) error {
	files, err := d.Files()
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	fds, err := fdpass.FDs(files)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if err := fdpass.Send(c, fds); err != nil {
		return err
	}
	msg, got, err := fdpass.Read(c, 0)
	fdpass.Close(got)
	if err != nil {
		return err
	}
	if msg != fmt.Sprintf("held %d", len(fds)) {
		return fmt.Errorf("holder: unexpected %q", msg)
	}
	return nil
}

// wait blocks until the lease ends (the holder stopped), ctx ends or
// Release is called.
func (s *Supplier) wait(ctx context.Context, c *net.UnixConn) {
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	left, gone := make(chan struct{}), make(chan struct{})
	defer func() { close(left); <-gone }()
	go func() {
		defer close(gone)
		select {
		case <-s.release:
			_ = c.SetReadDeadline(time.Unix(1, 0))
		case <-left:
		}
	}()
	for {
		msg, fds, err := fdpass.Read(c, 0)
		fdpass.Close(fds)
		if err != nil {
			if !s.releasing() && ctx.Err() == nil {
				s.log.Warn("the holder went away; supplying it again once it is back", zap.Error(err))
			}
			return
		}
		s.log.Warn("holder: unexpected message", zap.String("msg", msg))
	}
}

func (s *Supplier) releasing() bool {
	select {
	case <-s.release:
		return true
	default:
		return false
	}
}

// finish tells the holder, on c when not nil, to close its copies, and
// records the outcome for Release.
func (s *Supplier) finish(c *net.UnixConn) {
	var err error
	if c != nil {
		err = sayRelease(c)
	}
	s.mu.Lock()
	s.conn, s.runErr = nil, err
	s.mu.Unlock()
}

func sayRelease(c *net.UnixConn) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := c.Write([]byte("release")); err != nil {
		return fmt.Errorf("holder release: %w", err)
	}
	msg, fds, err := fdpass.Read(c, 0)
	fdpass.Close(fds)
	if err != nil {
		return fmt.Errorf("holder release: %w", err)
	}
	if msg != "released" {
		return fmt.Errorf("holder release: unexpected %q", msg)
	}
	return nil
}

// Release tells the holder that this frontend stops cleanly (its sockets
// are handed over or closed): the holder closes its copies at once instead
// of holding them for a restart. It stops Run.
func (s *Supplier) Release() error {
	s.once.Do(func() { close(s.release) })
	s.mu.Lock()
	started, c := s.started, s.conn
	s.mu.Unlock()
	if !started {
		if c == nil {
			return nil
		}
		s.setConn(nil)
		return sayRelease(c)
	}
	select {
	case <-s.done:
	case <-time.After(2 * handshakeTimeout):
		return errors.New("holder release: no answer")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runErr
}

// Close ends the lease without releasing: the holder keeps the sockets
// for a restart. For a frontend that stops without serving.
func (s *Supplier) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}
