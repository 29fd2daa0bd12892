package server

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/shared/metrics/metricstest"
)

// vmRSS returns this process's resident set size in bytes, from
// /proc/self/status.
func vmRSS(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status to read the RSS from: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestTCPBigMessagesRSS opens 1,000 TCP connections (8 clients of 125)
// that each send one 65,535-byte message, and measures what the process's
// RSS grew by once the server has read every length prefix. No buffer
// grows with what a connection sends, so the RSS moves by a few MiB at
// most (before, each connection kept a 64 KiB buffer: 64 MiB).
func TestTCPBigMessagesRSS(t *testing.T) {
	s, set := startServer(t, Config{}, &fakeHandler{})
	addr := s.Addrs()[0]
	const clients, perClient = 8, DefaultMaxTCPConns / 8
	msg := binary.BigEndian.AppendUint16(nil, 65535)
	msg = append(msg, make([]byte, 65535)...)
	conns := make([]net.Conn, 0, clients*perClient)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	before := vmRSS(t)
	for i := range clients * perClient {
		c, err := dialFrom(t, "tcp", fmt.Sprintf("127.0.0.%d", 2+i/perClient), addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(msg) // the server may close before it all is sent
	}
	waitFor(t, func() bool {
		return metricstest.Value(t, set, "nodedns_server_packets_total", "proto", "tcp", "direction", "in") == clients*perClient
	})
	after := vmRSS(t)
	grew := float64(after-before) / (1 << 20)
	t.Logf("RSS %.1f MiB before, %.1f MiB after %d connections each sent a 65,535-byte message: %+.1f MiB",
		float64(before)/(1<<20), float64(after)/(1<<20), len(conns), grew)
	limit := 8.0
	if raceEnabled {
		// Measured: +27 MiB with the race detector's own state for 1,000
		// connections and their goroutines, against +324 MiB before.
		limit = 48
		t.Logf("race detector on: allowing %.0f MiB (it inflates RSS); run without -race for the real figure", limit)
	}
	if grew > limit {
		t.Errorf("RSS grew by %.1f MiB, want at most %.0f MiB", grew, limit)
	}
}
