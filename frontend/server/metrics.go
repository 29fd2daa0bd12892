package server

import (
	vm "github.com/VictoriaMetrics/metrics"

	"github.com/nodedns/nodedns/shared/metrics"
)

// serverMetrics holds the server's series. Label values are pre-created so
// the hot path never looks a child up by name.
type serverMetrics struct {
	udpIn, udpOut, tcpIn, tcpOut *vm.Counter
	batch                        *vm.PrometheusHistogram
	overloaded                   *vm.Counter
	inflight                     *vm.Gauge
	tcpConns                     *vm.Gauge
	tcpRejected                  *vm.Counter
	udpReadErr, tcpReadErr       *vm.Counter
	udpWriteErr, tcpWriteErr     *vm.Counter
	dropped                      *vm.Counter
	panics                       *vm.Counter
}

// Families of the server's series.
const (
	packetsFamily     = metrics.Namespace + "_server_packets_total"
	batchFamily       = metrics.Namespace + "_server_batch_size"
	overloadedFamily  = metrics.Namespace + "_server_overloaded_total"
	inflightFamily    = metrics.Namespace + "_server_inflight"
	tcpConnsFamily    = metrics.Namespace + "_server_tcp_connections"
	tcpRejectedFamily = metrics.Namespace + "_server_tcp_rejected_total"
	readErrFamily     = metrics.Namespace + "_server_read_errors_total"
	writeErrFamily    = metrics.Namespace + "_server_write_errors_total"
	droppedFamily     = metrics.Namespace + "_server_dropped_total"
	panicsFamily      = metrics.Namespace + "_server_panics_total"
)

func newMetrics(set *vm.Set) *serverMetrics {
	metrics.Help(packetsFamily, "DNS messages received (direction=in) and sent (direction=out), by transport.")
	metrics.Help(batchFamily, "Datagrams returned by one recvmmsg call.")
	metrics.Help(overloadedFamily, "Misses answered without resolution because max-inflight misses were already running.")
	metrics.Help(inflightFamily, "Misses being resolved right now.")
	metrics.Help(tcpConnsFamily, "Open TCP client connections.")
	metrics.Help(tcpRejectedFamily, "TCP connections closed at accept because max TCP connections were open.")
	metrics.Help(readErrFamily, "Socket read and accept errors, by transport.")
	metrics.Help(writeErrFamily, "Socket write errors, by transport.")
	metrics.Help(droppedFamily, "Received datagrams dropped unanswered because they were truncated (larger than 1232 bytes) or shorter than a DNS header.")
	metrics.Help(panicsFamily, "Handler panics recovered (each query answered SERVFAIL).")
	packets := func(proto, direction string) *vm.Counter {
		return set.NewCounter(metrics.Name(packetsFamily, "proto", proto, "direction", direction))
	}
	return &serverMetrics{
		udpIn:       packets("udp", "in"),
		udpOut:      packets("udp", "out"),
		tcpIn:       packets("tcp", "in"),
		tcpOut:      packets("tcp", "out"),
		batch:       set.NewPrometheusHistogramExt(batchFamily, []float64{1, 2, 4, 8, 16, 32, 64, 128}),
		overloaded:  set.NewCounter(overloadedFamily),
		inflight:    set.NewGauge(inflightFamily, nil),
		tcpConns:    set.NewGauge(tcpConnsFamily, nil),
		tcpRejected: set.NewCounter(tcpRejectedFamily),
		udpReadErr:  set.NewCounter(metrics.Name(readErrFamily, "proto", "udp")),
		tcpReadErr:  set.NewCounter(metrics.Name(readErrFamily, "proto", "tcp")),
		udpWriteErr: set.NewCounter(metrics.Name(writeErrFamily, "proto", "udp")),
		tcpWriteErr: set.NewCounter(metrics.Name(writeErrFamily, "proto", "tcp")),
		dropped:     set.NewCounter(droppedFamily),
		panics:      set.NewCounter(panicsFamily),
	}
}
