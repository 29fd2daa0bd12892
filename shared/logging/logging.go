// Package logging builds the single zap logger each nodedns process injects
// into its components.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a JSON logger at the given level ("debug", "info", "warn",
// "error"). Components derive their own with logger.Named("component").
func New(level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.EncoderConfig.TimeKey = "ts"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	// Sampling keeps a burst of identical errors (a broken backend under
	// load) from flooding the node's log.
	cfg.Sampling = &zap.SamplingConfig{Initial: 100, Thereafter: 100}
	return cfg.Build()
}
