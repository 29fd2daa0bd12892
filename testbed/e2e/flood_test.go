package e2e

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

const (
	// floodBatch is how many queries the flood has in flight: under the
	// frontend's --max-inflight-per-source (250 at the chart's defaults),
	// so that each miss is resolved and cached, not refused.
	floodBatch = 64
	// floodSilence is how many batches in a row, unanswered for a second
	// each, end the flood: the frontend was killed.
	floodSilence = 3
)

// floodResult is what floodCache did.
type floodResult struct {
	sent, answered int
	took           time.Duration
	why            string // why it stopped
}

func (f floodResult) String() string {
	return fmt.Sprintf("%d names sent and %d answered in %s, stopped: %s", f.sent, f.answered, f.took.Round(100*time.Millisecond), f.why)
}

// floodCache queries dst through conn for 0.zone, 1.zone, … up to
// names names, floodBatch at a time, each a miss that the frontend
// resolves and caches. It stops when ctx ends, when the names are all
// sent, or when floodSilence batches in a row got no answer.
func floodCache(ctx context.Context, conn net.PacketConn, dst net.Addr, zone string, names int) (res floodResult) {
	start := time.Now()
	defer func() { res.took = time.Since(start) }()
	buf := make([]byte, dns.MaxMsgSize)
	silent := 0
	for {
		switch {
		case ctx.Err() != nil:
			res.why = "the frontend was restarted"
			return res
		case res.sent >= names:
			res.why = "every name sent"
			return res
		case silent >= floodSilence:
			res.why = fmt.Sprintf("no answer for %d s", floodSilence)
			return res
		}
		for range floodBatch {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("%d.%s.", res.sent, zone), dns.TypeA)
			m.Id = uint16(res.sent)
			wire, err := m.Pack()
			if err == nil {
				_, err = conn.WriteTo(wire, dst)
			}
			if err != nil {
				res.why = err.Error()
				return res
			}
			res.sent++
		}
		got := 0
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		for got < floodBatch {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				break
			}
			got++
		}
		res.answered += got
		if got == 0 {
			silent++
		} else {
			silent = 0
		}
	}
}
