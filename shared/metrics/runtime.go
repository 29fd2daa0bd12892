package metrics

import (
	"bytes"
	"math"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
)

// The Go runtime's series, under the names and types the Prometheus Go
// client's default collector gives them (go_memstats_*, go_goroutines,
// go_gc_duration_seconds, go_info, go_gc_gogc_percent, ...), so that the
// dashboards written for any Go service, and for the CoreDNS backend
// beside the frontend, read the frontend's too. A few runtime/metrics
// values the client only exports on request are added under names that
// follow the same conventions.

// runtimeSeries maps runtime/metrics samples to the scalar series written
// from them. Metric names absent from the running Go version (the sample
// reads back as KindBad) are skipped.
var runtimeSeries = []struct {
	sample, name, typ, help string
}{
	{"/sched/gomaxprocs:threads", "go_sched_gomaxprocs_threads", "gauge", "GOMAXPROCS: the number of OS threads that may run Go code at once."},
	{"/gc/gogc:percent", "go_gc_gogc_percent", "gauge", "The GOGC setting: heap growth, in percent of the live heap, that triggers a collection."},
	{"/gc/gomemlimit:bytes", "go_gc_gomemlimit_bytes", "gauge", "The GOMEMLIMIT setting, the runtime's soft memory limit."},
	{"/cpu/classes/gc/total:cpu-seconds", "go_gc_cpu_seconds_total", "counter", "CPU time spent by the garbage collector, estimated by the runtime."},
	{"/cpu/classes/gc/mark/assist:cpu-seconds", "go_gc_mark_assist_cpu_seconds_total", "counter", "CPU time goroutines spent assisting the garbage collector's marking, estimated by the runtime."},
	{"/cpu/classes/scavenge/total:cpu-seconds", "go_scavenge_cpu_seconds_total", "counter", "CPU time spent returning unused memory to the OS, estimated by the runtime."},
	{"/sync/mutex/wait/total:seconds", "go_mutex_wait_seconds_total", "counter", "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex, estimated by the runtime."},
}

// schedLatency is the runtime histogram of the time goroutines wait,
// runnable, before they run: on the frontend, queueing delay added to
// every answer.
const schedLatency = "/sched/latencies:seconds"

// schedLatencyBounds are the le bounds of go_sched_latencies_seconds. The
// runtime keeps about a hundred finer buckets; each bound here counts the
// observations of the runtime buckets that end at or below it.
var schedLatencyBounds = []float64{1e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// gcPauseQuantiles are the quantiles of go_gc_duration_seconds, those of
// the Prometheus Go client.
var gcPauseQuantiles = []float64{0, 0.25, 0.5, 0.75, 1}

// writeGoMetrics writes the Go runtime's series of this process.
func writeGoMetrics(w *bytes.Buffer) {
	samples := make([]rtmetrics.Sample, len(runtimeSeries)+1)
	for i, s := range runtimeSeries {
		samples[i].Name = s.sample
	}
	samples[len(runtimeSeries)].Name = schedLatency
	rtmetrics.Read(samples)

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	writeGCDuration(w, "go_gc_duration_seconds", &ms)
	writeGauge(w, "go_goroutines", "Goroutines that currently exist.", float64(runtime.NumGoroutine()))
	writeFamily(w, "go_info", "gauge", "Information about the Go environment: the version the binary was built with.")
	writeSample(w, `go_info{version="`+escaper.Replace(runtime.Version())+`"}`, 1)
	for _, m := range []struct {
		name, help string
		v          uint64
		counter    bool
	}{
		{"go_memstats_alloc_bytes", "Bytes of allocated heap objects.", ms.Alloc, false},
		{"go_memstats_alloc_bytes_total", "Bytes allocated for heap objects, freed or not.", ms.TotalAlloc, true},
		{"go_memstats_buck_hash_sys_bytes", "Bytes of memory in profiling bucket hash tables.", ms.BuckHashSys, false},
		{"go_memstats_frees_total", "Heap objects freed.", ms.Frees, true},
		{"go_memstats_gc_sys_bytes", "Bytes of memory in garbage collection metadata.", ms.GCSys, false},
		{"go_memstats_heap_alloc_bytes", "Bytes of allocated heap objects (as go_memstats_alloc_bytes).", ms.HeapAlloc, false},
		{"go_memstats_heap_idle_bytes", "Bytes in idle (unused) heap spans.", ms.HeapIdle, false},
		{"go_memstats_heap_inuse_bytes", "Bytes in in-use heap spans.", ms.HeapInuse, false},
		{"go_memstats_heap_objects", "Allocated heap objects.", ms.HeapObjects, false},
		{"go_memstats_heap_released_bytes", "Bytes of physical memory returned to the OS.", ms.HeapReleased, false},
		{"go_memstats_heap_sys_bytes", "Bytes of heap memory obtained from the OS.", ms.HeapSys, false},
		{"go_memstats_lookups_total", "Pointer lookups performed by the runtime.", ms.Lookups, true},
		{"go_memstats_mallocs_total", "Heap objects allocated.", ms.Mallocs, true},
		{"go_memstats_mcache_inuse_bytes", "Bytes of allocated mcache structures.", ms.MCacheInuse, false},
		{"go_memstats_mcache_sys_bytes", "Bytes of memory obtained from the OS for mcache structures.", ms.MCacheSys, false},
		{"go_memstats_mspan_inuse_bytes", "Bytes of allocated mspan structures.", ms.MSpanInuse, false},
		{"go_memstats_mspan_sys_bytes", "Bytes of memory obtained from the OS for mspan structures.", ms.MSpanSys, false},
		{"go_memstats_next_gc_bytes", "Heap size at which the next garbage collection cycle starts.", ms.NextGC, false},
		{"go_memstats_other_sys_bytes", "Bytes of memory in miscellaneous off-heap runtime allocations.", ms.OtherSys, false},
		{"go_memstats_stack_inuse_bytes", "Bytes in stack spans.", ms.StackInuse, false},
		{"go_memstats_stack_sys_bytes", "Bytes of stack memory obtained from the OS.", ms.StackSys, false},
		{"go_memstats_sys_bytes", "Bytes of memory obtained from the OS, in total.", ms.Sys, false},
	} {
		if m.counter {
			writeCounter(w, m.name, m.help, float64(m.v))
		} else {
			writeGauge(w, m.name, m.help, float64(m.v))
		}
	}
	writeGauge(w, "go_memstats_gc_cpu_fraction", "Fraction of the CPU time available to the process used by the garbage collector since the process started.", ms.GCCPUFraction)
	writeGauge(w, "go_memstats_last_gc_time_seconds", "Time of the last garbage collection, in seconds since the Unix epoch (0 before the first).", float64(ms.LastGC)/1e9)
	threads, _ := runtime.ThreadCreateProfile(nil)
	writeGauge(w, "go_threads", "OS threads created by the runtime.", float64(threads))

	for i, s := range runtimeSeries {
		v, ok := sampleValue(samples[i].Value)
		if !ok {
			continue
		}
		writeFamily(w, s.name, s.typ, s.help)
		writeSample(w, s.name, v)
	}
	if v := samples[len(runtimeSeries)].Value; v.Kind() == rtmetrics.KindFloat64Histogram {
		writeRuntimeHistogram(w, "go_sched_latencies_seconds",
			"Time goroutines spent runnable before running; each bound counts the runtime's finer buckets that end at or below it.",
			v.Float64Histogram(), schedLatencyBounds)
	}
}

// sampleValue returns a scalar sample as a float, and false for a sample
// the running Go version does not have (or a histogram).
func sampleValue(v rtmetrics.Value) (float64, bool) {
	switch v.Kind() {
	case rtmetrics.KindUint64:
		return float64(v.Uint64()), true
	case rtmetrics.KindFloat64:
		return v.Float64(), true
	}
	return 0, false
}

// writeGCDuration writes go_gc_duration_seconds (as name), a summary of the
// stop-the-world pauses of the last garbage collections (the runtime keeps
// the last 256), with the sum and count over the process's life.
func writeGCDuration(w *bytes.Buffer, name string, ms *runtime.MemStats) {
	n := min(int(ms.NumGC), len(ms.PauseNs))
	pauses := make([]float64, n)
	for i := range n {
		// PauseNs is a circular buffer; the most recent pause is at
		// (NumGC+255)%256.
		pauses[i] = float64(ms.PauseNs[(int(ms.NumGC)-1-i+len(ms.PauseNs))%len(ms.PauseNs)]) / 1e9
	}
	slices.Sort(pauses)
	writeFamily(w, name, "summary", "Stop-the-world pause durations of the last (at most 256) garbage collection cycles.")
	for _, q := range gcPauseQuantiles {
		v := 0.0
		if n > 0 {
			v = pauses[int(math.Round(q*float64(n-1)))]
		}
		writeSample(w, name+`{quantile="`+strconv.FormatFloat(q, 'g', -1, 64)+`"}`, v)
	}
	writeSample(w, name+"_sum", float64(ms.PauseTotalNs)/1e9)
	writeSample(w, name+"_count", float64(ms.NumGC))
}

// writeRuntimeHistogram writes a runtime histogram as a Prometheus one with
// the given bounds. A runtime bucket [lo, hi) is counted under every bound
// at or above hi, so each cumulative count is exact for the observations
// below the runtime bucket boundary nearest the bound. The runtime keeps no
// sum, so the series has buckets only (its +Inf bucket is the count).
func writeRuntimeHistogram(w *bytes.Buffer, name, help string, h *rtmetrics.Float64Histogram, bounds []float64) {
	writeFamily(w, name, "histogram", help)
	var cum uint64
	j := 0
	for i, c := range h.Counts {
		hi := h.Buckets[i+1]
		for ; j < len(bounds) && hi > bounds[j]; j++ {
			writeSample(w, name+`_bucket{le="`+strconv.FormatFloat(bounds[j], 'g', -1, 64)+`"}`, float64(cum))
		}
		cum += c
	}
	for ; j < len(bounds); j++ {
		writeSample(w, name+`_bucket{le="`+strconv.FormatFloat(bounds[j], 'g', -1, 64)+`"}`, float64(cum))
	}
	writeSample(w, name+`_bucket{le="+Inf"}`, float64(cum))
}
