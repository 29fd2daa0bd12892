package scenario

import (
	"context"
	"io"
)

// Crosscheck compares the generator's closed-loop maximum with dnsperf's
// against the same nameserver.
type Crosscheck struct {
	Design string `json:"design"`
	Error  string `json:"error,omitempty"`
}

func (e *Env) crosscheck(ctx context.Context, cfg Config, w io.Writer) (*Crosscheck, error) {
	return &Crosscheck{}, nil
}
