package holder

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/nodedns/nodedns/frontend/srcpolicy"
)

// SocketName is the name of the holder's unix socket in its directory.
const SocketName = "holder.sock"

// DefaultTimeout is how long the holder keeps the sockets of a frontend
// that died without a word. kubelet restarts a crashed container at once,
// then after a back-off of 10s, 20s, 40s... (CrashLoopBackOff, capped at
// 5m). 30s bridges the first three restarts in a row, container start
// included; a frontend that is not back by then is crash-looping, and
// pods are better served by an error at once (nothing bound: the kernel
// refuses) than by a queue nobody reads, where each lookup waits for its
// resolver's whole timeout (glibc: 2 attempts of 5s) before it fails.
const DefaultTimeout = 30 * time.Second

// Defaults of the relay (Config.Relay).
const (
	// DefaultRelayAfter is how long after a frontend died the holder waits
	// before it reads the held sockets itself: kubelet restarts a crashed
	// container at once, and a frontend back within this time takes the
	// queue with its cache rather than find it drained through the relay.
	DefaultRelayAfter = time.Second
	// DefaultRelayTimeout bounds the relay of one query, every relay
	// address tried included: a stub resolver gives up after 5s (glibc's
	// timeout), and an answer of SERVFAIL before then lets it try its next
	// nameserver or fail the lookup at once instead of waiting.
	DefaultRelayTimeout = 3500 * time.Millisecond
	// DefaultRelayMaxInflight bounds the queries being relayed at once;
	// past it a query waits for a slot (relaySlotWait), then gets
	// SERVFAIL, as do those after it until a slot frees. Each costs a goroutine and a
	// connection to a relay address, a few KiB, so that silent relay
	// addresses cannot grow the holder past its memory limit.
	DefaultRelayMaxInflight = 256
	// DefaultRelayMaxConns bounds the clients' TCP connections served
	// while relaying; further ones are closed at once.
	DefaultRelayMaxConns = 64
)

// Config is the holder's configuration.
type Config struct {
	// Dir is the directory of the holder's socket (SocketName), shared
	// with the frontend; created 0750 when missing. Required.
	Dir string
	// Timeout is how long sockets are held after their frontend died
	// without releasing them; DefaultTimeout when zero.
	Timeout time.Duration
	// Relay are DNS servers (IP:port) reached over TCP: when set, the
	// holder answers the queries of a dead frontend's sockets through them
	// from RelayAfter after its death until a frontend says hello, and
	// Timeout does not apply. Empty: the sockets are only held.
	Relay []string
	// RelayAfter is how long after a frontend's death relaying starts;
	// DefaultRelayAfter when zero.
	RelayAfter time.Duration
	// RelayTimeout bounds the relay of one query; DefaultRelayTimeout
	// when zero.
	RelayTimeout time.Duration
	// RelayMaxInflight bounds the queries relayed at once;
	// DefaultRelayMaxInflight when zero.
	RelayMaxInflight int
	// RelayMaxConns bounds the clients' TCP connections served while
	// relaying; DefaultRelayMaxConns when zero.
	RelayMaxConns int
	// Sources is who the relay answers: the frontend's --allow-networks,
	// the same policy. A UDP query from another source gets REFUSED, a TCP
	// connection from one is closed at accept, as the frontend does; both
	// are counted (denied, in the relay's log). Nil: everybody.
	Sources *srcpolicy.Policy
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("holder directory: empty"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("hold timeout %v: must not be negative", c.Timeout))
	}
	for _, a := range c.Relay {
		if _, err := netip.ParseAddrPort(a); err != nil {
			errs = append(errs, fmt.Errorf("relay address %q: want IP:port", a))
		}
	}
	if c.RelayAfter < 0 || c.RelayTimeout < 0 || c.RelayMaxInflight < 0 || c.RelayMaxConns < 0 {
		errs = append(errs, errors.New("relay settings: must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RelayAfter == 0 {
		c.RelayAfter = DefaultRelayAfter
	}
	if c.RelayTimeout == 0 {
		c.RelayTimeout = DefaultRelayTimeout
	}
	if c.RelayMaxInflight == 0 {
		c.RelayMaxInflight = DefaultRelayMaxInflight
	}
	if c.RelayMaxConns == 0 {
		c.RelayMaxConns = DefaultRelayMaxConns
	}
	return c
}

// Path returns the holder's socket path in dir.
func Path(dir string) string { return filepath.Join(dir, SocketName) }
