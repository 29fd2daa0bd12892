// Package holder keeps a frontend's listening sockets open across the
// frontend's death, so that a crash or an OOM kill loses no query: the
// kernel queues datagrams in the sockets' receive buffers and connections
// in the TCP accept queue while no frontend runs, and the restarted
// frontend takes the very same sockets back and drains what queued.
//
// The holder runs as a process of its own (nodedns-frontend hold) in a
// container beside the frontend's, in the same pod. It holds duplicates
// of the frontend's descriptors, that is the same open sockets, not new
// ones: while the frontend runs they are no extra members of the
// SO_REUSEPORT groups and take no share of the traffic. Only while no
// frontend reads do they queue it. Without Config.Relay, for at most
// Config.Timeout; then the holder closes them, so that clients get an
// error at once rather than wait on a queue. With Config.Relay, from
// Config.RelayAfter after the frontend's death until the next frontend
// says hello, the holder reads them itself and answers each query through
// the relay addresses, or with SERVFAIL (relay.go): a frontend in a crash
// loop no longer takes the node's DNS down for its back-off.
//
// Protocol, over a SOCK_SEQPACKET connection to <dir>/holder.sock:
//
//	frontend → holder  "hello <listen,addrs>"   its --listen
//	holder → frontend  "busy" and close          another frontend holds the lease
//	holder → frontend  "files" + fds, "end <n>"  the sockets held (n may be 0)
//	frontend → holder  "files" + fds, "end <n>"  the sockets it serves now
//	holder → frontend  "held <n>"                the held set is replaced by those
//	frontend → holder  "release"                 a clean stop: close them
//	holder → frontend  "released"
//
// The connection from "hello" on is the lease: one frontend at a time. Its
// end without "release" means the frontend died: the holder keeps the
// sockets for Config.Timeout (or relays them), and hands them to the next
// frontend that says hello. Held sockets are replaced as soon as a frontend says what it
// serves, and closed when a frontend asks with other listen addresses, so
// that no copy the holder keeps sits unread in a SO_REUSEPORT group beside
// sockets a live frontend bound afresh.
package holder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/frontend/internal/fdpass"
	"github.com/nodedns/nodedns/frontend/srcpolicy"
)

// handshakeTimeout bounds each exchange of the protocol: both ends are on
// the same node and answer within milliseconds.
const handshakeTimeout = 5 * time.Second

// Holder holds a frontend's sockets. Create it with New; Run serves.
type Holder struct {
	cfg Config      // with defaults applied
	log *zap.Logger // always non-nil

	mu     sync.Mutex // guards the fields below
	fds    []int      // the sockets held, owned by the holder
	listen string     // the --listen of the frontend that gave fds
	owner  *net.UnixConn
	expiry *time.Timer // running while fds are held and no frontend owns them
	closed bool

	relayTimer *time.Timer // with Config.Relay: starts the relay after RelayAfter
	relay      *relay      // reading fds while no frontend runs
}

// New returns a Holder for cfg.
func New(cfg Config, log *zap.Logger) (*Holder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Holder{cfg: cfg.withDefaults(), log: log}, nil
}

// Held returns the number of sockets held.
func (h *Holder) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.fds)
}

// leased reports whether a frontend holds the lease.
func (h *Holder) leased() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner != nil
}

// Run listens on the holder's socket and serves frontends until ctx ends;
// then it closes every socket it holds. started, when non-nil, is called
// once it listens.
func (h *Holder) Run(ctx context.Context, started func()) error {
	l, err := listen(h.cfg.Dir)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	h.log.Info("holding sockets for the frontend", zap.String("socket", Path(h.cfg.Dir)), zap.Duration("timeout", h.cfg.Timeout))
	if started != nil {
		started()
	}
	var wg sync.WaitGroup
	defer func() {
		h.shutdown()
		wg.Wait()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("holder accept: %w", err)
		}
		wg.Go(func() { h.serve(c) })
	}
}

// listen binds the holder's socket in dir, replacing a socket file left
// there by an earlier holder. The socket is 0660: the frontend runs as
// root (group 0) without CAP_DAC_OVERRIDE, the holder as any user of
// group 0, and nobody else may take the node's DNS sockets.
func listen(dir string) (*net.UnixListener, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("holder dir: %w", err)
	}
	path := Path(dir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("holder socket: %w", err)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("holder socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("holder socket: %w", err)
	}
	return l, nil
}

// shutdown closes the held sockets and the lease: the holder is stopping
// (its pod is deleted, so the frontend stops too).
func (h *Holder) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.owner != nil {
		_ = h.owner.Close()
	}
	h.dropLocked("holder stopping")
}

// dropLocked closes the held sockets. h.mu must be held.
func (h *Holder) dropLocked(why string) {
	h.stopRelayLocked(why)
	if h.expiry != nil {
		h.expiry.Stop()
		h.expiry = nil
	}
	if len(h.fds) > 0 {
		h.log.Info("closing the held sockets", zap.Int("sockets", len(h.fds)), zap.String("why", why))
	}
	fdpass.Close(h.fds)
	h.fds, h.listen = nil, ""
}

// serve runs one frontend's connection: the lease from hello to its end.
func (h *Holder) serve(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	msg, fds, err := fdpass.Read(c, 0)
	if err != nil {
		h.log.Warn("frontend connection", zap.Error(err))
		return
	}
	fdpass.Close(fds)
	listen, ok := strings.CutPrefix(msg, "hello ")
	if !ok {
		h.log.Warn("frontend connection", zap.String("unexpected", msg))
		return
	}
	offer, ok := h.acquire(c, listen)
	if !ok {
		_, _ = c.Write([]byte("busy"))
		return
	}
	released := false
	defer func() { h.leave(c, released) }()
	err = fdpass.Send(c, offer)
	fdpass.Close(offer)
	if err != nil {
		h.log.Warn("offer the held sockets", zap.Error(err))
		return
	}
	for {
		_ = c.SetDeadline(time.Time{})
		msg, fds, err := fdpass.Read(c, fdpass.MaxFDs)
		if err != nil {
			if !errors.Is(err, fdpass.ErrClosed) {
				h.log.Warn("frontend connection", zap.Error(err))
			}
			return
		}
		_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
		if msg == "release" {
			fdpass.Close(fds)
			h.mu.Lock()
			h.dropLocked("the frontend stopped cleanly")
			h.mu.Unlock()
			released = true
			_, _ = c.Write([]byte("released"))
			return
		}
		set, err := fdpass.ReceiveRest(c, msg, fds)
		if err != nil {
			h.log.Warn("receive the frontend's sockets", zap.Error(err))
			return
		}
		n := h.replace(set, listen)
		if _, err := c.Write([]byte("held " + strconv.Itoa(n))); err != nil {
			h.log.Warn("frontend connection", zap.Error(err))
			return
		}
	}
}

// acquire makes c the lease holder and returns duplicates of the held
// sockets to offer it (none when they serve other addresses: those are
// closed). false means another frontend holds the lease.
func (h *Holder) acquire(c *net.UnixConn, listen string) ([]int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner != nil || h.closed {
		return nil, false
	}
	h.owner = c
	h.stopRelayLocked("a frontend said hello")
	if h.expiry != nil {
		h.expiry.Stop()
		h.expiry = nil
	}
	if len(h.fds) > 0 && h.listen != listen {
		h.dropLocked("the frontend listens on " + listen + ", they on " + h.listen)
	}
	offer := make([]int, 0, len(h.fds))
	for _, fd := range h.fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			h.log.Warn("duplicate a held socket", zap.Error(err))
			continue
		}
		offer = append(offer, d)
	}
	if len(offer) > 0 {
		h.log.Info("handing the held sockets to a frontend", zap.Int("sockets", len(offer)))
	}
	return offer, true
}

// replace makes fds the held set, closing the previous one, and returns
// its size.
func (h *Holder) replace(fds []int, listen string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.fds
	h.fds, h.listen = fds, listen
	fdpass.Close(old)
	h.log.Debug("holding the frontend's sockets", zap.Int("sockets", len(fds)))
	return len(fds)
}

// leave ends c's lease. Unless the frontend released the sockets, it died:
// they are held for cfg.Timeout or, with cfg.Relay, relayed from
// cfg.RelayAfter on.
func (h *Holder) leave(c *net.UnixConn, released bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner != c {
		return
	}
	h.owner = nil
	if released || len(h.fds) == 0 || h.closed {
		return
	}
	if len(h.cfg.Relay) > 0 {
		h.log.Warn("the frontend died; holding its sockets for the next one", zap.Int("sockets", len(h.fds)), zap.Duration("relay_after", h.cfg.RelayAfter))
		var t *time.Timer
		t = time.AfterFunc(h.cfg.RelayAfter, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.relayTimer == t && h.owner == nil && !h.closed {
				h.relayTimer = nil
				h.startRelayLocked()
			}
		})
		h.relayTimer = t
		return
	}
	h.log.Warn("the frontend died; holding its sockets for the next one", zap.Int("sockets", len(h.fds)), zap.Duration("timeout", h.cfg.Timeout))
	h.expireLocked()
}

// expireLocked closes the held sockets after cfg.Timeout unless a
// frontend comes back first. h.mu must be held.
func (h *Holder) expireLocked() {
	var t *time.Timer
	t = time.AfterFunc(h.cfg.Timeout, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.expiry == t && h.owner == nil {
			h.expiry = nil
			h.dropLocked("no frontend came back within the hold timeout")
		}
	})
	h.expiry = t
}

// startRelayLocked starts answering the held sockets' queries through
// cfg.Relay: no frontend came back within cfg.RelayAfter. The sockets are
// then kept, and served, until a frontend says hello; when none of them
// can be read, they are only held, for cfg.Timeout. h.mu must be held.
func (h *Holder) startRelayLocked() {
	if len(h.fds) == 0 {
		return
	}
	r, err := startRelay(h.cfg, h.log.Named("relay"), h.fds)
	if err != nil {
		h.log.Error("cannot relay the held sockets; holding them only", zap.Error(err), zap.Duration("timeout", h.cfg.Timeout))
		h.expireLocked()
		return
	}
	h.relay = r
	h.log.Warn("no frontend runs: answering the held sockets through the relay until one says hello",
		zap.Strings("relay", h.cfg.Relay), zap.Int("sockets", len(h.fds)), zap.String("allow_networks", allowNetworks(h.cfg.Sources)),
		zap.String("why", "no frontend said hello within "+h.cfg.RelayAfter.String()+" of the last one's death"))
}

// allowNetworks is p for the log: the policy as given, or "everybody".
func allowNetworks(p *srcpolicy.Policy) string {
	if p == nil {
		return "everybody"
	}
	return p.String()
}

// stopRelayLocked stops the relay timer and the relay: the relay stops
// reading at once, and answers what it read in the background. h.mu must
// be held.
func (h *Holder) stopRelayLocked(why string) {
	if h.relayTimer != nil {
		h.relayTimer.Stop()
		h.relayTimer = nil
	}
	if h.relay == nil {
		return
	}
	h.relay.stop()
	h.log.Info("stopped relaying", append([]zap.Field{zap.String("why", why)}, h.relay.counts()...)...)
	h.relay = nil
}
