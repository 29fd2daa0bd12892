package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/upstream"
)

// errStatus marks an HTTP probe answered with a status other than 200.
var errStatus = errors.New("not ready")

// probeHTTP GETs the ready URL: 200 is ready, anything else is not. The
// first line of the body joins the error, since CoreDNS's ready plugin lists
// the plugins that are not ready there.
func (g *Gate) probeHTTP(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.cfg.ReadyURL, nil)
	if err != nil {
		return err
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if line != "" {
		return fmt.Errorf("%w: %s (%s)", errStatus, resp.Status, line)
	}
	return fmt.Errorf("%w: %s", errStatus, resp.Status)
}

// probeDNS asks the backend the probe question over TCP, the transport the
// frontend uses. Any well-formed response counts, whatever its rcode,
// SERVFAIL included: it shows that the listener and the plugin chain work.
// A SERVFAIL for ". NS" usually means the node's own resolvers failed the
// backend's forwarder; other nodes' backends share them, so moving to a
// fallback would not help, and refusing to take over the node's DNS would
// break cluster names that the backend still answers. Whether the
// backend's plugins are ready is the HTTP probe's question.
func (g *Gate) probeDNS(ctx context.Context) (rcode int, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(g.cfg.ProbeName), g.cfg.ProbeType)
	c := &dns.Client{Net: "tcp", Timeout: g.cfg.Timeout}
	r, _, err := c.ExchangeContext(ctx, q, g.cfg.Backend)
	if err != nil {
		return 0, err
	}
	if !r.Response || len(r.Question) > 0 && !strings.EqualFold(r.Question[0].Name, q.Question[0].Name) {
		return 0, upstream.ErrMismatch
	}
	return r.Rcode, nil
}
