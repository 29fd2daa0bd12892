package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// queryIn sends one query over UDP from inside netns.
func queryIn(netns, server, name string, qtype uint16) (*dns.Msg, time.Duration, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var r *dns.Msg
	var rtt time.Duration
	err := inNetns(netns).Do(func() (err error) {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		r, rtt, err = c.Exchange(m, server)
		return err
	})
	return r, rtt, err
}

// waitDNS waits until server answers from netns (any rcode but SERVFAIL).
func waitDNS(ctx context.Context, p *process, netns, server string, timeout time.Duration) error {
	return poll(ctx, p, timeout, fmt.Sprintf("%s from %s: no answer", server, netns), func(context.Context) error {
		r, _, err := queryIn(netns, server, "kubernetes.default.svc.cluster.local.", dns.TypeA)
		if err == nil && r.Rcode != dns.RcodeSuccess {
			err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
		}
		return err
	})
}
