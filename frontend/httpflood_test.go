package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/httpserve/floodtest"
)

// TestHTTPFloodKeepsProbesAnswering runs the frontend as a process of its
// own and holds 1,000 connections open to each of its health and metrics
// ports, re-dialling each one it closes, idle or sending a head one byte at
// a time: kubelet's probes and Prometheus's scrapes must keep getting 200
// within kubelet's 1 s timeout, no endpoint failing as many times in a row
// as kubelet's failureThreshold (3), on which kubelet would act.
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
	}{
		{"idle from one address", floodtest.Idle, []string{"127.0.0.2"}},
		{"idle from 8 addresses", floodtest.Idle, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}},
		{"slowloris from 4 addresses", floodtest.Slowloris, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}},
		// The probes' own address (127.0.0.1), re-dialled as fast as the
		// server closes: without deferred accepts a probe lost its slot
		// in the moment between its connect and its head.
		{"idle from the probes' address", floodtest.Idle, []string{"127.0.0.1"}},
	} {
		before := httpEvictions(t, p.ready.Metrics)
		t.Run(tt.name, func(t *testing.T) {
			for _, addr := range []string{p.ready.Health, p.ready.Metrics} {
				floodtest.StartProcess(t, addr, 1000, tt.sources, tt.mode)
			}
			// Idle connections reach the server only after about a
			// second (TCP_DEFER_ACCEPT): probe the flood's steady state.
			time.Sleep(1500 * time.Millisecond)
			var worst time.Duration
			var streaks floodtest.Streaks
			for round := range 10 {
				for _, url := range []string{
					"http://" + p.ready.Health + "/health",
					"http://" + p.ready.Health + "/ready",
					"http://" + p.ready.Metrics + "/metrics",
				} {
					r := floodtest.Get(url, time.Second)
					streaks.Add(url, r.Status == 200)
					if r.Status != 200 {
						t.Logf("round %d: GET %s: %d %v after %v", round, url, r.Status, r.Err, r.Elapsed)
					}
					worst = max(worst, r.Elapsed)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// kubelet acts on failureThreshold failures in a row, not on
			// one probe that missed its 1 s on a starved machine.
			url, run := streaks.Longest()
			if run >= floodtest.KubeletFailureThreshold {
				t.Errorf("%s failed %d times in a row: kubelet (failureThreshold %d) would act", url, run, floodtest.KubeletFailureThreshold)
			}
			t.Logf("%d of 30 probes and scrapes failed, at most %d in a row, slowest %v", streaks.Failed(), run, worst)
		})
		// The flood is stopped by now; the counters say it reached the
		// limits (else the test measured nothing).
		evicted := httpEvictions(t, p.ready.Metrics) - before
		t.Logf("%s: %v connections evicted (nodedns_http_connections_evicted_total)", tt.name, evicted)
		if evicted < 1000 {
			t.Errorf("%s: only %v connections evicted: the flood did not reach the limits", tt.name, evicted)
		}
	}
	select {
	case <-p.exited:
		t.Fatalf("the frontend exited: %v\n%s", p.err, p.logs())
	default:
	}
}

// httpEvictions returns the sum of nodedns_http_connections_evicted_total
// over its series, read from the frontend's /metrics at addr.
func httpEvictions(t *testing.T, addr string) float64 {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "nodedns_http_connections_evicted_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		t.Fatalf("/metrics has no nodedns_http_connections_evicted_total")
	}
	return sum
}
