package server

import (
	vm "github.com/VictoriaMetrics/metrics"

	"github.com/nodedns/nodedns/shared/metrics"
)

// serverMetrics holds the server's series. Label values are pre-created so
// the hot path never looks a child up by name. What every batch updates is
// kept per P and summed at scrape time (metrics.NewShardedCounters), so
// that the readers of different cores share no cache line and no lock.
type serverMetrics struct {
	udpIn, udpOut, tcpIn, tcpOut metrics.ShardedCounter
	batch                        *metrics.ShardedHistogram
	queueDelay                   *metrics.ShardedHistogram
	overloaded                   *vm.Counter
	inflight                     *vm.Gauge
	tcpConns                     *vm.Gauge
	tcpRejected                  *vm.Counter
	tcpEvicted                   *vm.Counter
	udpReadErr, tcpReadErr       *vm.Counter
	udpWriteErr, tcpWriteErr     *vm.Counter
	dropped                      *vm.Counter
	udpDenied, tcpDenied         *vm.Counter
	panics                       *vm.Counter
	refused                      [numRefusals]*vm.Counter // by refusal
}

// refusal is why a miss or a TCP connection was refused for capacity:
// the label values of nodedns_server_refused_total.
type refusal uint8

const (
	refusedInflightTotal  refusal = iota // MaxInflight misses running
	refusedInflightSource                // the client had MaxInflightPerSource running
	refusedTCPTotal                      // MaxTCPConns connections open
	refusedTCPSource                     // the client had MaxTCPConnsPerSource open
	refusedQueueDelay                    // shed for a standing queue (shed.go)
	refusedInflightDomain                // the domain had MaxInflightPerDomain running
	numRefusals
)

var refusalNames = [numRefusals]string{"inflight_total", "inflight_source", "tcp_conns_total", "tcp_conns_source", "queue_delay", "inflight_domain"}

// Families of the server's series.
const (
	packetsFamily     = metrics.Namespace + "_server_packets_total"
	batchFamily       = metrics.Namespace + "_server_batch_size"
	queueDelayFamily  = metrics.Namespace + "_server_udp_queue_delay_seconds"
	limitFamily       = metrics.Namespace + "_server_inflight_limit"
	overloadedFamily  = metrics.Namespace + "_server_overloaded_total"
	inflightFamily    = metrics.Namespace + "_server_inflight"
	tcpConnsFamily    = metrics.Namespace + "_server_tcp_connections"
	tcpRejectedFamily = metrics.Namespace + "_server_tcp_rejected_total"
	tcpEvictedFamily  = metrics.Namespace + "_server_tcp_evicted_total"
	readErrFamily     = metrics.Namespace + "_server_read_errors_total"
	writeErrFamily    = metrics.Namespace + "_server_write_errors_total"
	droppedFamily     = metrics.Namespace + "_server_dropped_total"
	panicsFamily      = metrics.Namespace + "_server_panics_total"
	refusedFamily     = metrics.Namespace + "_server_refused_total"
	deniedFamily      = metrics.Namespace + "_server_denied_total"
)

func newMetrics(set *vm.Set) *serverMetrics {
	metrics.Help(packetsFamily, "DNS messages received (direction=in) and sent (direction=out), by transport.")
	metrics.Help(batchFamily, "Datagrams returned by one recvmmsg call.")
	metrics.Help(queueDelayFamily, "How long the first datagram of each recvmmsg batch, the oldest queued, had waited in its socket's queue.")
	metrics.Help(limitFamily, "Misses that may be in flight now: max-inflight, lower while the UDP sockets' queues stand (shed-delay).")
	metrics.Help(overloadedFamily, "Misses answered without resolution because max-inflight misses were already running, over all clients or of the client, or the limit lowered for a standing queue.")
	metrics.Help(inflightFamily, "Misses being resolved right now.")
	metrics.Help(tcpConnsFamily, "Open TCP client connections.")
	metrics.Help(tcpRejectedFamily, "TCP connections closed at accept because max TCP connections were open, over all clients or of the client.")
	metrics.Help(tcpEvictedFamily, "Idle TCP connections closed to make room for a new one when every slot it could take was held (RFC 7766 section 6.2.3).")
	metrics.Help(readErrFamily, "Socket read and accept errors, by transport.")
	metrics.Help(writeErrFamily, "Socket write errors, by transport.")
	metrics.Help(droppedFamily, "Received messages dropped unanswered because they were larger than 1232 bytes (a TCP connection is then closed) or shorter than a DNS header.")
	metrics.Help(refusedFamily, "Misses (answered stale or SERVFAIL) and TCP connections (closed) refused for capacity, by reason: inflight_total, inflight_source, tcp_conns_total, tcp_conns_source, queue_delay, inflight_domain.")
	metrics.Help(deniedFamily, "Queries (UDP, answered REFUSED) and TCP connections (closed at accept) from sources outside --allow-networks, by transport.")
	metrics.Help(panicsFamily, "Handler panics recovered (each query answered SERVFAIL).")
	packet := func(proto, direction string) string {
		return metrics.Name(packetsFamily, "proto", proto, "direction", direction)
	}
	// In the order a VictoriaMetrics set writes them (sorted).
	packets := metrics.NewShardedCounters(set,
		packet("tcp", "in"), packet("tcp", "out"), packet("udp", "in"), packet("udp", "out"))
	var refused [numRefusals]*vm.Counter
	for r, name := range refusalNames {
		refused[r] = set.NewCounter(metrics.Name(refusedFamily, "reason", name))
	}
	return &serverMetrics{
		refused: refused,
		tcpIn:   packets[0],
		tcpOut:  packets[1],
		udpIn:   packets[2],
		udpOut:  packets[3],
		batch:   metrics.NewShardedHistogram(set, batchFamily, []float64{1, 2, 4, 8, 16, 32, 64, 128}),
		queueDelay: metrics.NewShardedHistogram(set, queueDelayFamily,
			[]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}),
		overloaded:  set.NewCounter(overloadedFamily),
		inflight:    set.NewGauge(inflightFamily, nil),
		tcpConns:    set.NewGauge(tcpConnsFamily, nil),
		tcpRejected: set.NewCounter(tcpRejectedFamily),
		tcpEvicted:  set.NewCounter(tcpEvictedFamily),
		udpReadErr:  set.NewCounter(metrics.Name(readErrFamily, "proto", "udp")),
		tcpReadErr:  set.NewCounter(metrics.Name(readErrFamily, "proto", "tcp")),
		udpWriteErr: set.NewCounter(metrics.Name(writeErrFamily, "proto", "udp")),
		tcpWriteErr: set.NewCounter(metrics.Name(writeErrFamily, "proto", "tcp")),
		dropped:     set.NewCounter(droppedFamily),
		udpDenied:   set.NewCounter(metrics.Name(deniedFamily, "proto", "udp")),
		tcpDenied:   set.NewCounter(metrics.Name(deniedFamily, "proto", "tcp")),
		panics:      set.NewCounter(panicsFamily),
	}
}
