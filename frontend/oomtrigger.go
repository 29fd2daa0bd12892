package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"
)

// Test-only: an OOM kill on demand. Tests of what pods see when the
// kernel's memory cgroup kills the frontend (and how kubelet restarts it)
// set oomFileEnv in the container's environment and create that file; the
// frontend then allocates until its memory limit is reached. Unset, nothing
// runs.
const (
	// oomFileEnv names the environment variable holding the trigger file.
	oomFileEnv = "NODEDNS_TEST_OOM_FILE"
	// oomPollInterval is how often the trigger file is looked for: a
	// test waits at most this long for the allocation to start.
	oomPollInterval = 200 * time.Millisecond
	// oomChunk is what each step of the allocation adds: four steps pass
	// the chart's 64Mi limit.
	oomChunk = 16 << 20
)

// startOOMTrigger starts, when path is not empty, a goroutine that looks
// for the file path every interval until ctx ends. Once it exists, the file
// is removed (so that the container kubelet restarts does not run out of
// memory again), one line is logged, and alloc is called; alloc is not
// expected to return (allocateUntilKilled). It returns whether the
// goroutine was started, and a channel closed when it ends.
func startOOMTrigger(ctx context.Context, path string, interval time.Duration, log *zap.Logger, alloc func()) (bool, <-chan struct{}) {
	if path == "" {
		return false, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := os.Remove(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				// Not removed: allocating now would make every restart
				// run out of memory again.
				log.Warn("test OOM trigger: file not removed; not allocating", zap.String("file", path), zap.Error(err))
				continue
			}
			log.Warn("test OOM trigger: allocating memory until the memory limit kills the process",
				zap.String("file", path), zap.String("env", oomFileEnv))
			alloc()
			return
		}
	}()
	return true, done
}

// allocateUntilKilled grows the heap by oomChunk at a time, writing every
// page so that each is charged to the memory cgroup, and keeps all of it
// reachable, so that neither the collector (however hard GOMEMLIMIT makes
// it work) nor the kernel's reclaim can give any back.
func allocateUntilKilled() {
	var held [][]byte
	for {
		held = touchChunk(held, oomChunk)
	}
}

// touchChunk appends a chunk of size bytes to held, with a byte written in
// every page.
func touchChunk(held [][]byte, size int) [][]byte {
	b := make([]byte, size)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	return append(held, b)
}
