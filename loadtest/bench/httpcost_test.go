package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestHTTPCostNeedsTwoBinaries(t *testing.T) {
	for _, tt := range []struct{ frontend, baseline string }{
		{"bin/nodedns-frontend", ""},
		{"", "/tmp/other"},
	} {
		cfg := DefaultHTTPCostConfig()
		cfg.FrontendBin, cfg.BaselineBin, cfg.OutDir = tt.frontend, tt.baseline, t.TempDir()
		if _, err := HTTPCost(context.Background(), cfg, &strings.Builder{}); err == nil {
			t.Errorf("frontend %q, baseline %q: no error", tt.frontend, tt.baseline)
		}
	}
}

func TestWriteHTTPCost(t *testing.T) {
	rows := []HTTPCostRow{
		{Name: Frontend, BinaryMiB: 6.59, IdleRSS: 10 << 20, RSS: 12 << 20, FloodRSS: 13 << 20, PeakRSS: 14 << 20, PerScrape: 1250 * time.Microsecond, PerProbe: 154 * time.Microsecond},
		{Name: Baseline, BinaryMiB: 8.59, IdleRSS: 11 << 20, PerScrape: 1290 * time.Microsecond, PerProbe: 150 * time.Microsecond, Failed: 2},
	}
	var b strings.Builder
	if err := WriteHTTPCost(&b, DefaultHTTPCostConfig(), rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"5 rounds x 1000 scrapes and 1000 probes per binary",
		"frontend        6.59          10.0           12.0              13.0          14.0           1250           154       0",
		"baseline        8.59          11.0            0.0               0.0           0.0           1290           150       2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
