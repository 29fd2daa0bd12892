package cache

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"zero size", func(c *Config) { c.Size = 0 }, false},
		{"negative size", func(c *Config) { c.NegativeSize = -1 }, false},
		{"sub-second TTL", func(c *Config) { c.MaxTTL = 1500 * time.Millisecond }, false},
		{"max below min", func(c *Config) { c.MinTTL = time.Hour; c.MaxTTL = time.Minute }, false},
		{"SERVFAIL over 5m", func(c *Config) { c.ServfailTTL = 10 * time.Minute }, false},
		{"entry size", func(c *Config) { c.MaxEntrySize = 100 }, false},
		{"serve-stale off", func(c *Config) { c.ServeStale = 0 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}
