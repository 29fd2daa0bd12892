package main

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// TestSIGHUPIgnored: CoreDNS's signal handling (caddy's) ignores SIGHUP;
// the backend must keep running and answering after one.
func TestSIGHUPIgnored(t *testing.T) {
	var fwd atomic.Int64
	up := fakeUpstream(t, &fwd)
	b, env := backendPorts(t)
	env = append(env, "NODEDNS_UPSTREAM="+up.Addr)
	b.start(t, smokeCorefile(t), env, 20*time.Second)
	for i := range 3 {
		if err := b.proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.proc.Done():
			t.Fatalf("exited after SIGHUP %d: %v", i+1, b.proc.Err())
		case <-time.After(300 * time.Millisecond):
		}
		r := dnstest.Exchange(t, "tcp", b.DNS, dnstest.Query("static.test.", dns.TypeA))
		if got := firstA(r); got != "192.0.2.10" {
			t.Fatalf("after SIGHUP %d: answer %q", i+1, got)
		}
	}
}
