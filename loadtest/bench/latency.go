package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// LatencyResult is the outcome of a fixed-rate run.
type LatencyResult struct {
	Sent, Received int64
	P50, P99, P999 time.Duration
	Max            time.Duration
	// RoundP99 is the median of the rounds' p99s: one round disturbed by
	// other work on the machine moves P99 but hardly this.
	RoundP99 time.Duration
}

// Lost returns the queries that got no answer within the run plus
// latencyDrain.
func (r LatencyResult) Lost() int64 { return r.Sent - r.Received }

// latencySamples collects the outcome of fixed-rate rounds.
type latencySamples struct {
	sent      int64
	lats      []time.Duration
	roundP99s []time.Duration // p99 of each round added
}

func (s *latencySamples) add(o latencySamples) {
	s.sent += o.sent
	s.lats = append(s.lats, o.lats...)
	if len(o.lats) > 0 {
		round := slices.Clone(o.lats)
		slices.Sort(round)
		s.roundP99s = append(s.roundP99s, percentile(round, 0.99))
	}
}

// result sorts the samples and returns their percentiles.
func (s *latencySamples) result() LatencyResult {
	slices.Sort(s.lats)
	r := LatencyResult{Sent: s.sent, Received: int64(len(s.lats))}
	if len(s.lats) > 0 {
		r.P50 = percentile(s.lats, 0.50)
		r.P99 = percentile(s.lats, 0.99)
		r.P999 = percentile(s.lats, 0.999)
		r.Max = s.lats[len(s.lats)-1]
	}
	if len(s.roundP99s) > 0 {
		p := slices.Sorted(slices.Values(s.roundP99s))
		r.RoundP99 = p[(len(p)-1)/2]
	}
	return r
}

// Fixed-rate generator settings.
const (
	// latencySockets spreads queries over several source ports, as pods
	// do, and keeps each socket's 16-bit ID space from wrapping within
	// a few seconds at 20k qps.
	latencySockets = 4
	// latencyTick is how often the sender wakes to send the queries that
	// are due; at 20k qps about 2 go out per tick, close to a steady
	// stream without a busy loop.
	latencyTick = 100 * time.Microsecond
	// latencyDrain is how long receivers wait for answers after the last
	// query; later answers count as lost.
	latencyDrain = time.Second
	// drainPoll is how often the end of a run checks whether every query
	// was answered, so that a round without losses ends at once.
	drainPoll = 5 * time.Millisecond
)

// runFixedRate sends qs round-robin to addr over UDP at rate queries per
// second for d and records each query's latency (send to answer).
func runFixedRate(ctx context.Context, addr string, qs []Query, rate int, d time.Duration) (latencySamples, error) {
	wire := make([][]byte, len(qs))
	for i, q := range qs {
		m := new(dns.Msg)
		m.SetQuestion(q.Name, q.Qtype)
		b, err := m.Pack()
		if err != nil {
			return latencySamples{}, fmt.Errorf("pack %s: %w", q.Name, err)
		}
		wire[i] = b
	}

	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return latencySamples{}, err
	}
	type sock struct {
		conn *net.UDPConn
		sent [1 << 16]atomic.Int64 // send time by query ID, ns since start+1; 0 = none outstanding
		lats []time.Duration       // written only by the socket's receiver
	}
	socks := make([]*sock, latencySockets)
	for i := range socks {
		c, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			for _, s := range socks[:i] {
				s.conn.Close()
			}
			return latencySamples{}, fmt.Errorf("latency generator: %w", err)
		}
		_ = c.SetReadBuffer(4 << 20)
		socks[i] = &sock{conn: c, lats: make([]time.Duration, 0, int(float64(rate)*d.Seconds())/latencySockets+1)}
	}

	start := time.Now()
	var received atomic.Int64
	var wg sync.WaitGroup
	for _, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for {
				n, err := s.conn.Read(buf)
				if err != nil {
					return // deadline after the drain, or closed
				}
				now := int64(time.Since(start)) + 1
				if n < 2 {
					continue
				}
				id := uint16(buf[0])<<8 | uint16(buf[1])
				if t := s.sent[id].Swap(0); t != 0 {
					s.lats = append(s.lats, time.Duration(now-t))
					received.Add(1)
				}
			}
		}()
	}

	var sent int64
	var sendErr error
	tick := time.NewTicker(latencyTick)
send:
	for {
		elapsed := time.Since(start)
		if elapsed >= d {
			break
		}
		due := int64(elapsed.Seconds() * float64(rate))
		for ; sent < due; sent++ {
			s := socks[sent%latencySockets]
			q := wire[sent%int64(len(wire))]
			id := uint16(sent / latencySockets)
			q[0], q[1] = byte(id>>8), byte(id)
			s.sent[id].Store(int64(time.Since(start)) + 1)
			if _, err := s.conn.Write(q); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
				sendErr = fmt.Errorf("latency generator send: %w", err)
				break send
			}
		}
		select {
		case <-ctx.Done():
			sendErr = ctx.Err()
			break send
		case <-tick.C:
		}
	}
	tick.Stop()
	for drain := time.Now().Add(latencyDrain); received.Load() < sent && time.Now().Before(drain); {
		time.Sleep(drainPoll)
	}
	for _, s := range socks {
		_ = s.conn.SetReadDeadline(time.Now()) // ends the receivers
	}
	wg.Wait()
	for _, s := range socks {
		s.conn.Close()
	}
	if sendErr != nil {
		return latencySamples{}, sendErr
	}

	out := latencySamples{sent: sent}
	for _, s := range socks {
		out.lats = append(out.lats, s.lats...)
	}
	return out, nil
}

// percentile returns the nearest-rank percentile p (0..1] of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
