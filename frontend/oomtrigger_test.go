package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestOOMTriggerUnsetStartsNothing(t *testing.T) {
	started, done := startOOMTrigger(context.Background(), "", time.Millisecond, zap.NewNop(), func() {
		t.Error("alloc called with the trigger unset")
	})
	if started || done != nil {
		t.Errorf("startOOMTrigger(\"\") = %v, %v; want false, nil", started, done)
	}
}

func TestOOMTriggerRemovesFileThenAllocates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom")
	core, logs := observer.New(zap.WarnLevel)
	allocated := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, done := startOOMTrigger(ctx, path, 5*time.Millisecond, zap.New(core), func() {
		_, err := os.Stat(path)
		allocated <- err
	})
	if !started {
		t.Fatal("trigger not started with a path")
	}
	// No file yet: several polls pass without allocating.
	time.Sleep(50 * time.Millisecond)
	select {
	case <-allocated:
		t.Fatal("alloc called before the file existed")
	default:
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-allocated:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("trigger file when alloc ran: stat err %v, want it removed first", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alloc not called 5s after the file was created")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("trigger goroutine still running after alloc returned")
	}
	if n := logs.FilterMessageSnippet("test OOM trigger").Len(); n != 1 {
		t.Errorf("%d warn lines logged, want 1: %v", n, logs.All())
	}
}

func TestOOMTriggerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, done := startOOMTrigger(ctx, filepath.Join(t.TempDir(), "oom"), time.Millisecond, zap.NewNop(), func() {
		t.Error("alloc called without the file")
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("trigger goroutine still running after its context ended")
	}
}

func TestTouchChunkWritesEveryPage(t *testing.T) {
	page := os.Getpagesize()
	var held [][]byte
	held = touchChunk(held, 3*page)
	held = touchChunk(held, 3*page)
	if len(held) != 2 {
		t.Fatalf("%d chunks held, want 2", len(held))
	}
	for i, b := range held {
		for p := 0; p < len(b); p += page {
			if b[p] == 0 {
				t.Errorf("chunk %d: page at %d not written", i, p)
			}
		}
	}
}
