package apicost

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (sysconf needs cgo).
const clockTicks = 100

// procUsage is what /proc says about one process.
type procUsage struct {
	CPU float64 // user+system CPU seconds since the process started
	RSS float64 // resident set, MiB
	HWM float64 // peak resident set since start or resetPeak, MiB
}

// readProc reads /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	if u.CPU, err = parseStatCPU(stat); err != nil {
		return u, fmt.Errorf("pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	u.RSS, u.HWM = parseStatusMemory(status)
	return u, nil
}

// parseStatCPU returns utime+stime in seconds. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat %q", stat)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse utime %q stime %q", f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// parseStatusMemory returns VmRSS and VmHWM in MiB.
func parseStatusMemory(status []byte) (rss, hwm float64) {
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// resetPeak resets VmHWM of pid to its current RSS (proc(5), clear_refs
// value 5; root or the process's owner).
func resetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS of pid %d: %w", pid, err)
	}
	return nil
}
