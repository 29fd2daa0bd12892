package main

import (
	"io"
	"testing"
	"time"
)

// TestBindTimeoutFlag: --bind-timeout reaches the server's BindRetry; by
// default an address in use fails at once; a negative wait is refused.
func TestBindTimeoutFlag(t *testing.T) {
	cfg, err := parseConfig([]string{"--setup-network=false", "--listen=127.0.0.1:53"}, io.Discard)
	if err != nil || cfg.bindTimeout != 0 {
		t.Fatalf("default: %v, %v; want 0", cfg.bindTimeout, err)
	}
	cfg, err = parseConfig([]string{"--setup-network=false", "--listen=127.0.0.1:53", "--bind-timeout=5m"}, io.Discard)
	if err != nil || cfg.bindTimeout != 5*time.Minute {
		t.Fatalf("--bind-timeout=5m: %v, %v", cfg.bindTimeout, err)
	}
	if _, err := parseConfig([]string{"--setup-network=false", "--listen=127.0.0.1:53", "--bind-timeout=-1s"}, io.Discard); err == nil {
		t.Fatal("--bind-timeout=-1s accepted")
	}
}
