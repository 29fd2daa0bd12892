package main

import "testing"

// TestBindRetryByMode: only node-ip mode waits for an address in use (the
// node IP's port 53, held by the DNS server being replaced); the other
// modes fail at once, as before.
func TestBindRetryByMode(t *testing.T) {
	for mode, want := range map[string]bool{"node-ip": true, "iptables": false, "link-local": false} {
		if got := bindRetry(mode); (got > 0) != want {
			t.Errorf("bindRetry(%q) = %s, want retrying %v", mode, got, want)
		}
	}
	if nodeIPBindRetry >= 30e9 {
		t.Errorf("nodeIPBindRetry %s: must stay below the chart's liveness probe (3 x 10 s) while /health is not up", nodeIPBindRetry)
	}
}
