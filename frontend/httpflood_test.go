package main

import (
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/httpserve/floodtest"
)

// TestHTTPFloodKeepsProbesAnswering runs the frontend as a process of its
// own and holds 1,000 connections open to each of its health and metrics
// ports, re-dialling each one it closes, idle or sending a head one byte at
// a time: kubelet's probes and Prometheus's scrapes must keep getting 200
// within kubelet's 1 s timeout.
func TestHTTPFloodKeepsProbesAnswering(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: floods the frontend with 2,000 connections for several seconds")
	}
	b := dnstest.Start(t, &backend{})
	p := startProc(t, append(baseArgs(t, b.Addr), "--log-level=info")...)
	for _, tt := range []struct {
		name    string
		mode    floodtest.Mode
		sources []string
		measure bool // log failures instead of failing
	}{
		{"idle from one address", floodtest.Idle, []string{"127.0.0.2"}, false},
		{"idle from 8 addresses", floodtest.Idle, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}, false},
		{"slowloris from 4 addresses", floodtest.Slowloris, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, false},
		// The probes' own address (127.0.0.1), re-dialled as fast as the
		// server closes: a probe can lose its slot in the moment between
		// its connect and its head. Measured, not asserted.
		{"idle from the probes' address", floodtest.Idle, []string{"127.0.0.1"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {

			for _, addr := range []string{p.ready.Health, p.ready.Metrics} {
				floodtest.StartProcess(t, addr, 1000, tt.sources, tt.mode)
			}
			var worst time.Duration
			failed := 0
			for round := range 10 {
				for _, url := range []string{
					"http://" + p.ready.Health + "/health",
					"http://" + p.ready.Health + "/ready",
					"http://" + p.ready.Metrics + "/metrics",
				} {
					r := floodtest.Get(url, time.Second)
					if r.Status != 200 {
						failed++
						report := t.Errorf
						if tt.measure {
							report = t.Logf
						}
						report("round %d: GET %s: %d %v after %v", round, url, r.Status, r.Err, r.Elapsed)
					}
					worst = max(worst, r.Elapsed)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%d of 30 probes and scrapes failed, slowest %v", failed, worst)
		})
	}
	select {
	case <-p.exited:
		t.Fatalf("the frontend exited: %v\n%s", p.err, p.logs())
	default:
	}
}
