package holder

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
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

// Config is the holder's configuration.
type Config struct {
	// Dir is the directory of the holder's socket (SocketName), shared
	// with the frontend; created 0750 when missing. Required.
	Dir string
	// Timeout is how long sockets are held after their frontend died
	// without releasing them; DefaultTimeout when zero.
	Timeout time.Duration
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
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Path returns the holder's socket path in dir.
func Path(dir string) string { return filepath.Join(dir, SocketName) }
