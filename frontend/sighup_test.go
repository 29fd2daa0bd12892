package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
)

// TestSIGHUPIgnored sends SIGHUP to a running frontend, whose default
// action would end the process without a drain or a teardown: it must keep
// running and answering.
func TestSIGHUPIgnored(t *testing.T) {
	b := dnstest.Start(t, &backend{})
	p := startProc(t, append(baseArgs(t, b.Addr), "--log-level=info")...)
	for i := range 3 {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.exited:
			t.Fatalf("exited after SIGHUP %d: %v\n%s", i+1, p.err, p.logs())
		case <-time.After(300 * time.Millisecond):
		}
		r := dnstest.Exchange(t, "udp", p.ready.DNS[0], dnstest.Query("after-sighup.example.org", dns.TypeA))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("after SIGHUP %d: %v", i+1, r)
		}
	}
	if got := httpGet(t, "http://"+p.ready.Health+"/health", 200); got == "" {
		t.Errorf("/health after SIGHUP: empty body")
	}
}
