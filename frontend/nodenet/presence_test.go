package nodenet

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestPresence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "network.lock")
	ctx := context.Background()
	old, err := Join(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := Join(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if last, release := old.Leave(); last {
		release()
		t.Fatal("old instance thinks it is the last while a newer one runs")
	}
	last, release := newer.Leave()
	if !last {
		t.Fatal("the only instance does not think it is the last")
	}
	// A third instance starting during that teardown waits for it.
	joined := make(chan error, 1)
	go func() {
		p, err := Join(ctx, path)
		if err == nil {
			_, rel := p.Leave()
			rel()
		}
		joined <- err
	}()
	select {
	case <-joined:
		t.Fatal("joined during a teardown")
	case <-time.After(3 * presencePoll):
	}
	release()
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	// Leave twice is harmless.
	if last, _ := newer.Leave(); last {
		t.Error("second Leave reported last")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	blocker, _ := Join(ctx, path)
	_, rel := blocker.Leave()
	defer rel()
	if _, err := Join(cctx, path); err == nil {
		t.Error("Join with a cancelled context during a teardown succeeded")
	}
}
