package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodedns/nodedns/shared/metrics"
)

// serverMetrics holds the server's series. Label values are pre-created so
// the hot path never looks a child up by name.
type serverMetrics struct {
	udpIn, udpOut, tcpIn, tcpOut prometheus.Counter
	batch                        prometheus.Observer
	overloaded                   prometheus.Counter
	inflight                     prometheus.Gauge
	tcpConns                     prometheus.Gauge
	tcpRejected                  prometheus.Counter
	udpReadErr, tcpReadErr       prometheus.Counter
	udpWriteErr, tcpWriteErr     prometheus.Counter
	dropped                      prometheus.Counter
	panics                       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *serverMetrics {
	const sub = "server"
	packets := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "packets_total",
		Help: "DNS messages received (direction=in) and sent (direction=out), by transport.",
	}, []string{"proto", "direction"})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "batch_size",
		Help:    "Datagrams returned by one recvmmsg call.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
	overloaded := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "overloaded_total",
		Help: "Misses answered without resolution because max-inflight misses were already running.",
	})
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "inflight",
		Help: "Misses being resolved right now.",
	})
	tcpConns := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "tcp_connections",
		Help: "Open TCP client connections.",
	})
	tcpRejected := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "tcp_rejected_total",
		Help: "TCP connections closed at accept because max TCP connections were open.",
	})
	readErr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "read_errors_total",
		Help: "Socket read and accept errors, by transport.",
	}, []string{"proto"})
	writeErr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "write_errors_total",
		Help: "Socket write errors, by transport.",
	}, []string{"proto"})
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "dropped_total",
		Help: "Received datagrams dropped unanswered because they were truncated (larger than 1232 bytes) or shorter than a DNS header.",
	})
	panics := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: sub, Name: "panics_total",
		Help: "Handler panics recovered (each query answered SERVFAIL).",
	})
	reg.MustRegister(packets, batch, overloaded, inflight, tcpConns, tcpRejected, readErr, writeErr, dropped, panics)
	return &serverMetrics{
		udpIn:       packets.WithLabelValues("udp", "in"),
		udpOut:      packets.WithLabelValues("udp", "out"),
		tcpIn:       packets.WithLabelValues("tcp", "in"),
		tcpOut:      packets.WithLabelValues("tcp", "out"),
		batch:       batch,
		overloaded:  overloaded,
		inflight:    inflight,
		tcpConns:    tcpConns,
		tcpRejected: tcpRejected,
		udpReadErr:  readErr.WithLabelValues("udp"),
		tcpReadErr:  readErr.WithLabelValues("tcp"),
		udpWriteErr: writeErr.WithLabelValues("udp"),
		tcpWriteErr: writeErr.WithLabelValues("tcp"),
		dropped:     dropped,
		panics:      panics,
	}
}
