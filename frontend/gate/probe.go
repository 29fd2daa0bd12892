package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
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
// It writes one HTTP/1.1 request on a connection of its own and reads the
// status line and header with net/textproto, without net/http: its client
// and server, with the TLS stack they link, would be about 2 MB of a binary
// that runs on every node, for one loopback GET a second. So there is no
// TLS, no proxy and no redirect.
func (g *Gate) probeHTTP(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	if err := g.get(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, errStatus) {
			// Reported as the context's error, as an HTTP client does:
			// a deadline is a timeout, a cancellation is not.
			return fmt.Errorf("get %s: %w", g.readyURL.Redacted(), ctx.Err())
		}
		return err
	}
	return nil
}

// headBytes bounds the status line and header of an answer.
const headBytes = 8 << 10

// get sends the GET on a new connection and reads the response. ctx's
// deadline bounds the dial, the write and the read; its cancellation
// closes the connection.
func (g *Gate) get(ctx context.Context) error {
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

	req := "GET " + g.readyURL.RequestURI() + " HTTP/1.1\r\nHost: " + g.readyURL.Host +
		"\r\nUser-Agent: nodedns-frontend\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	br := bufio.NewReader(io.LimitReader(conn, headBytes+detailBytes+drainBytes))
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	code, status, err := parseStatusLine(line)
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if code == 200 {
		_, _ = io.CopyN(io.Discard, br, drainBytes)
		return nil
	}
	if strings.EqualFold(hdr.Get("Transfer-Encoding"), "chunked") {
		_, _ = tp.ReadLine() // the first chunk's size
	}
	body, _ := io.ReadAll(io.LimitReader(br, detailBytes))
	_, _ = io.CopyN(io.Discard, br, drainBytes)
	detail, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if detail = strings.TrimSpace(detail); detail != "" {
		return fmt.Errorf("%w: %s (%s)", errStatus, status, detail)
	}
	return fmt.Errorf("%w: %s", errStatus, status)
}

// parseStatusLine splits "HTTP/1.1 503 Service Unavailable" into 503 and
// "503 Service Unavailable".
func parseStatusLine(line string) (code int, status string, err error) {
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 {
		return 0, "", fmt.Errorf("malformed HTTP status line %q", line)
	}
	code, err = strconv.Atoi(status[:3])
	if err != nil || code < 100 || code > 999 || len(status) > 3 && status[3] != ' ' {
		return 0, "", fmt.Errorf("malformed HTTP status line %q", line)
	}
	return code, status, nil
}

// probeDNS asks the backend the probe question over TCP, the transport the
// frontend uses. Any well-formed response counts, whatever its rcode,
// SERVFAIL included: it shows that the listener and the plugin chain work.
// The default question is answered from the backend's memory; with
// another one that is forwarded, a SERVFAIL usually means the node's own
// resolvers failed the backend's forwarder; other nodes' backends share
// them, so moving to a fallback would not help, and refusing to take over
// the node's DNS would break cluster names that the backend still answers. Whether the
// backend's plugins are ready is the HTTP probe's question.
func (g *Gate) probeDNS(ctx context.Context) (rcode int, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(g.cfg.ProbeName), g.cfg.ProbeType)
	r, err := upstream.Exchange(ctx, "tcp", g.cfg.Backend, q, g.cfg.Timeout)
	if err != nil {
		return 0, err
	}
	if !r.Response || len(r.Question) > 0 && !strings.EqualFold(r.Question[0].Name, q.Question[0].Name) {
		return 0, upstream.ErrMismatch
	}
	return r.Rcode, nil
}
