package main

import (
	"io"
	"testing"
	"time"

	"github.com/nodedns/nodedns/frontend/holder"
)

// TestREADMEListsHoldFlags checks the HOLDER section against the flags of
// `hold`, as TestREADMEListsEveryFlag does FLAGS against the frontend's.
func TestREADMEListsHoldFlags(t *testing.T) {
	var cfg holdConfig
	checkFlagsListed(t, "HOLDER", newHoldFlagSet(&cfg, io.Discard))
}

// TestHoldRelayFlags: --relay and --relay-after reach the holder's Config,
// with their defaults when absent.
func TestHoldRelayFlags(t *testing.T) {
	cfg, err := parseHoldConfig([]string{"--holder-dir=/run/h", "--relay=10.96.0.11:5301, [fd00::11]:53"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.holder.Relay; len(got) != 2 || got[0] != "10.96.0.11:5301" || got[1] != "[fd00::11]:53" {
		t.Errorf("--relay: %q", got)
	}
	if cfg.holder.RelayAfter != holder.DefaultRelayAfter {
		t.Errorf("--relay-after default %v, want %v", cfg.holder.RelayAfter, holder.DefaultRelayAfter)
	}
	cfg, err = parseHoldConfig([]string{"--holder-dir=/run/h", "--relay-after=250ms"}, io.Discard)
	if err != nil || len(cfg.holder.Relay) != 0 || cfg.holder.RelayAfter != 250*time.Millisecond {
		t.Errorf("--relay-after=250ms: relay %q, after %v, %v", cfg.holder.Relay, cfg.holder.RelayAfter, err)
	}
}

func TestHoldFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--holder-dir=/run/h"}, true},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=5s", "--log-level=debug"}, true},
		{nil, false},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=30"}, false},
		{[]string{"--holder-dir=/run/h", "--hold-timeout=0s"}, false},
		{[]string{"--holder-dir=/run/h", "--log-level=loud"}, false},
		{[]string{"--holder-dir=/run/h", "extra"}, false},
		{[]string{"--holder-dir=/run/h", "--relay=10.96.0.11:5301", "--relay-after=2s"}, true},
		{[]string{"--holder-dir=/run/h", "--relay=10.96.0.11:5301,[fd00::11]:5301"}, true},
		{[]string{"--holder-dir=/run/h", "--relay="}, true},
		{[]string{"--holder-dir=/run/h", "--relay=10.96.0.11"}, false},
		{[]string{"--holder-dir=/run/h", "--relay=fallback.kube-system:53"}, false},
		{[]string{"--holder-dir=/run/h", "--relay=10.96.0.11:5301,10.96.0.12"}, false},
		{[]string{"--holder-dir=/run/h", "--relay-after=0s"}, false},
		{[]string{"--holder-dir=/run/h", "--relay-after=-1s"}, false},
		{[]string{"--holder-dir=/run/h", "--relay-after=1"}, false},
		{[]string{"--holder-dir=/run/h", "--relay=10.96.0.11:5301", "--allow-networks=local,10.244.0.0/16,2001:db8::/56"}, true},
		{[]string{"--holder-dir=/run/h", "--allow-networks="}, true},
		{[]string{"--holder-dir=/run/h", "--allow-networks=local,10.244.0.0/33"}, false},
		{[]string{"--holder-dir=/run/h", "--allow-networks=pods"}, false},
	} {
		_, err := parseHoldConfig(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("hold %q: %v, want ok %v", tc.args, err, tc.ok)
		}
		if tc.ok {
			continue
		}
		if code := realMain(append([]string{"hold"}, tc.args...), io.Discard, io.Discard); code != 2 {
			t.Errorf("hold %q: exit %d, want 2", tc.args, code)
		}
	}
}
