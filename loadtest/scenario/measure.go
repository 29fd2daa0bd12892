package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuSeconds returns utime+stime of pid.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return float64(ut+st) / clockTicks, nil
}

// peakRSS returns VmHWM of pid in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// runqueueWait returns how long pid's threads have waited on a CPU's run
// queue, runnable but not running (the second field of each thread's
// /proc/PID/task/TID/schedstat, in ns): the scheduler's delay, as against
// the CPU time the process used.
func runqueueWait(pid int) (time.Duration, error) {
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, d.Name()))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %q", pid, d.Name(), b)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %w", pid, d.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// procsRunqueueWait sums runqueueWait over ps (see procsCPU).
func procsRunqueueWait(ps []*process) time.Duration {
	var sum time.Duration
	for _, p := range ps {
		if d, err := runqueueWait(p.PID()); err == nil {
			sum += d
		}
	}
	return sum
}

// procsCPU sums cpuSeconds over ps (processes that exited count 0 from
// then on: chaos compares snapshots of live processes only).
func procsCPU(ps []*process) float64 {
	sum := 0.0
	for _, p := range ps {
		if s, err := cpuSeconds(p.PID()); err == nil {
			sum += s
		}
	}
	return sum
}

func procsPeakRSS(ps []*process) int64 {
	var sum int64
	for _, p := range ps {
		if v, err := peakRSS(p.PID()); err == nil {
			sum += v
		}
	}
	return sum
}

// txPackets returns the transmit packet counter of dev in netns.
func txPackets(ctx context.Context, netns, dev string) (uint64, error) {
	out, err := run(ctx, "ip", "-n", netns, "-s", "-j", "link", "show", "dev", dev)
	if err != nil {
		return 0, err
	}
	var links []struct {
		Stats64 struct {
			TX struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("ip -s -j link show %s: %v: %s", dev, err, out)
	}
	return links[0].Stats64.TX.Packets, nil
}

// conntrackEntries returns the number of live conntrack entries in netns.
func conntrackEntries(ctx context.Context, netns string) (int, error) {
	out, err := run(ctx, "ip", "netns", "exec", netns, "conntrack", "-C")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// conntrackWatch counts new conntrack entries in a namespace from the
// kernel's event stream (conntrack -E); the "insert" statistic of
// conntrack -S stays 0 on current kernels.
type conntrackWatch struct {
	cmd   *exec.Cmd
	count atomic.Int64
	lost  atomic.Int64 // lines reporting lost events (netlink buffer full)
	done  chan struct{}
}

func watchConntrack(netns string) (*conntrackWatch, error) {
	w := &conntrackWatch{done: make(chan struct{})}
	w.cmd = exec.Command("ip", "netns", "exec", netns, "conntrack", "-E", "-e", "NEW", "-b", "33554432")
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.cmd.Stderr = w.cmd.Stdout
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("conntrack -E: %w", err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.Contains(line, "[NEW]"):
				w.count.Add(1)
			case strings.Contains(line, "No buffer space"):
				w.lost.Add(1)
			}
		}
	}()
	return w, nil
}

// Stop ends the watch and returns the entries created (and whether
// events were lost).
func (w *conntrackWatch) Stop() (int64, bool) {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.done
	_ = w.cmd.Wait()
	return w.count.Load(), w.lost.Load() > 0
}
