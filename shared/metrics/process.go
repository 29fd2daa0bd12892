package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// The process's series, read from procfs (proc(5)) under the names, types
// and units of the Prometheus client's process collector:
// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_virtual_memory_max_bytes,
// process_start_time_seconds, process_open_fds and process_max_fds.

// userHZ is the unit of the CPU times and of the start time in
// /proc/PID/stat: clock ticks of sysconf(_SC_CLK_TCK), which Linux fixes
// at 100 for everything procfs shows (USER_HZ, proc(5)).
const userHZ = 100

// procSelf is where the process's own procfs files are.
const procSelf = "/proc/self"

// procStat holds the fields of /proc/PID/stat the series need.
type procStat struct {
	utime, stime uint64 // CPU time in user and kernel mode, clock ticks
	starttime    uint64 // start after boot, clock ticks
	vsize        uint64 // virtual memory, bytes
	rss          uint64 // resident pages
}

// parseStat reads /proc/PID/stat (proc(5)). The second field, the command
// in parentheses, may itself hold spaces and parentheses, so the fields
// are counted from the last ") ".
func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndex(data, []byte(") "))
	if i < 0 {
		return procStat{}, fmt.Errorf("stat: no command in parentheses in %q", truncate(data))
	}
	// Fields from the third on: state is f[0], utime (14th) f[11],
	// stime f[12], starttime (22nd) f[19], vsize f[20], rss f[21].
	f := bytes.Fields(data[i+2:])
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("stat: %d fields after the command, want at least 22", len(f))
	}
	var s procStat
	for _, v := range []struct {
		dst *uint64
		idx int
	}{{&s.utime, 11}, {&s.stime, 12}, {&s.starttime, 19}, {&s.vsize, 20}, {&s.rss, 21}} {
		n, err := strconv.ParseUint(string(f[v.idx]), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("stat: field %d: %w", v.idx+3, err)
		}
		*v.dst = n
	}
	return s, nil
}

// parseBootTime returns the btime line of /proc/stat: the boot time in
// seconds since the Unix epoch.
func parseBootTime(data []byte) (uint64, error) {
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat btime: %w", err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc/stat: no btime line")
}

// parseLimit returns the soft limit of the resource named (as in "Max open
// files") from /proc/PID/limits, +Inf when it is unlimited.
func parseLimit(data []byte, resource string) (float64, error) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte(resource))
		if !ok || len(rest) == 0 || rest[0] != ' ' {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			break
		}
		if string(f[0]) == "unlimited" {
			return math.Inf(1), nil
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("limits %q: %w", resource, err)
		}
		return float64(n), nil
	}
	return 0, fmt.Errorf("limits: no %q line", resource)
}

// writeProcessMetrics writes the process series from the procfs files of
// dir (procSelf; the boot time comes from stat beside it). A file that
// cannot be read or parsed leaves out its series and writes the error as
// a comment line, which scrapers ignore and a person reading /metrics
// sees.
func writeProcessMetrics(w *bytes.Buffer, dir string) {
	fail := func(err error) {
		w.WriteString("# process series left out: ")
		w.WriteString(truncate([]byte(err.Error())))
		w.WriteByte('\n')
	}
	page := float64(os.Getpagesize())
	if data, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil {
		fail(err)
	} else if s, err := parseStat(data); err != nil {
		fail(fmt.Errorf("%s: %w", filepath.Join(dir, "stat"), err))
	} else {
		writeCounter(w, "process_cpu_seconds_total", "CPU time the process spent in user and kernel mode.", float64(s.utime+s.stime)/userHZ)
		writeGauge(w, "process_resident_memory_bytes", "Resident memory of the process.", float64(s.rss)*page)
		writeGauge(w, "process_virtual_memory_bytes", "Virtual memory of the process.", float64(s.vsize))
		if data, err := os.ReadFile(filepath.Join(dir, "..", "stat")); err != nil {
			fail(err)
		} else if boot, err := parseBootTime(data); err != nil {
			fail(err)
		} else {
			writeGauge(w, "process_start_time_seconds", "Start time of the process, in seconds since the Unix epoch.", float64(boot)+float64(s.starttime)/userHZ)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "limits")); err != nil {
		fail(err)
	} else {
		if v, err := parseLimit(data, "Max open files"); err != nil {
			fail(err)
		} else {
			writeGauge(w, "process_max_fds", "Soft limit on the number of open file descriptors.", v)
		}
		if v, err := parseLimit(data, "Max address space"); err != nil {
			fail(err)
		} else {
			writeGauge(w, "process_virtual_memory_max_bytes", "Soft limit on the virtual memory of the process (+Inf when unlimited).", v)
		}
	}
	if n, err := countFDs(filepath.Join(dir, "fd")); err != nil {
		fail(err)
	} else {
		writeGauge(w, "process_open_fds", "Open file descriptors.", float64(n))
	}
}

// countFDs counts the entries of /proc/PID/fd (the directory's own
// descriptor among them, as the Prometheus client counts).
func countFDs(dir string) (int, error) {
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(256)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", dir, err)
		}
	}
}

// truncate bounds what an error quotes of a file, and keeps it on one line.
func truncate(b []byte) string {
	if len(b) > 120 {
		b = append(b[:120:120], "..."...)
	}
	return string(bytes.ReplaceAll(b, []byte("\n"), []byte(`\n`)))
}
