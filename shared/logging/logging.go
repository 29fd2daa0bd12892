// Package logging builds the single zap logger each nodedns process injects
// into its components.
package logging

import (
	"fmt"
	"os"
	"time"

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

// NewQueryLog returns the logger of a query log: JSON lines at info level
// on standard error, encoded as New's, but every entry written (the
// caller samples; New's sampling would keep 100 lines a second), without
// the caller's file and line, through a 64 KiB buffer flushed every
// second, so that a line costs no write of its own. stop flushes it.
func NewQueryLog() (log *zap.Logger, stop func() error) {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.Lock(os.Stderr), Size: 64 << 10, FlushInterval: time.Second}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, zap.InfoLevel)
	return zap.New(core), ws.Stop
}
