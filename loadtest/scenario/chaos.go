package scenario

import (
	"context"
	"io"
)

// ChaosRow is one chaos experiment on one design.
type ChaosRow struct {
	Experiment string `json:"experiment"`
	Design     string `json:"design"`
	Lookups    uint64 `json:"lookups"`
	// Lost lookups timed out on every attempt; Failed got an error
	// answer; Slow took longer than one second (a retry or worse).
	Lost   uint64 `json:"lost"`
	Failed uint64 `json:"failed"`
	Slow   uint64 `json:"slow"`
	Note   string `json:"note,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (e *Env) chaos(ctx context.Context, cfg Config, w io.Writer) []ChaosRow {
	return nil
}
