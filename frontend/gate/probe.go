package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/upstream"
)

// errStatus marks an HTTP probe answered with a status other than 200.
var errStatus = errors.New("not ready")

// Bounds of what the HTTP probe reads from an answer.
const (
	// detailBytes is read for the detail of a failed probe: CoreDNS's
	// ready plugin lists the plugins that are not ready on one line.
	detailBytes = 256
	// drainBytes more are read before closing, so that an answer of a
	// usual size is consumed and closing sends FIN, not RST, to the server.
	drainBytes = 4096
)

// readyAddr returns the host:port to dial for the ready URL u.
func readyAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// probeHTTP GETs the ready URL: 200 is ready, anything else is not. The
// first line of the body joins the error, since CoreDNS's ready plugin lists
// the plugins that are not ready there.
//
// It writes one HTTP/1.1 request on a connection of its own and reads one
// response with net/http's message code, without http.Client: its
// Transport would bring HTTP/2 and TLS clients into the binary for one
// loopback GET a second. So there is no TLS, no proxy and no redirect.
func (g *Gate) probeHTTP(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.cfg.ReadyURL, nil)
	if err != nil {
		return err
	}
	req.Close = true // "Connection: close": one request per connection
	if err := g.get(ctx, req); err != nil {
		if ctx.Err() != nil && !errors.Is(err, errStatus) {
			// Reported as the context's error, as an HTTP client does:
			// a deadline is a timeout, a cancellation is not.
			return fmt.Errorf("get %s: %w", g.readyURL.Redacted(), ctx.Err())
		}
		return err
	}
	return nil
}

// get sends req on a new connection and reads the response. ctx's
// deadline bounds the dial, the write and the read; its cancellation
// closes the connection.
func (g *Gate) get(ctx context.Context, req *http.Request) error {
	conn, err := g.dialer.DialContext(ctx, "tcp", g.dialTo)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	if err := req.Write(conn); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, detailBytes))
	_, _ = io.CopyN(io.Discard, resp.Body, drainBytes)
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
