package resolver

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.Server = ""
	cfg.Cache.Size = 0
	cfg.AnswerTimeout = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "server") || !strings.Contains(err.Error(), "cache size") ||
		!strings.Contains(err.Error(), "answer timeout") {
		t.Errorf("Validate() = %v, want the three errors", err)
	}
}
