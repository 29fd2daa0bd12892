package upstream

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

// Exchange sends m to addr over network ("udp" or "tcp") on a connection of
// its own and returns the answer, for one-off queries such as probes. It
// is miekg/dns's Client.Exchange without the client: Client can also dial
// DNS over TLS, which links the TLS stack into a binary that never uses it.
// timeout bounds the whole exchange, within ctx.
func Exchange(ctx context.Context, network, addr string, m *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	co := &dns.Conn{Conn: nc, UDPSize: dns.DefaultMsgSize}
	defer co.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := co.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = co.Close() })
	defer stop()
	if err := co.WriteMsg(m); err != nil {
		return nil, ctxErr(ctx, err)
	}
	for {
		r, err := co.ReadMsg()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if r.Id == m.Id {
			return r, nil
		}
		if network != "udp" {
			return nil, fmt.Errorf("%w: id %d, want %d", ErrMismatch, r.Id, m.Id)
		}
		// UDP: a stray or late datagram; keep reading until the deadline.
	}
}

// ctxErr reports an I/O error caused by ctx ending as ctx's error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
