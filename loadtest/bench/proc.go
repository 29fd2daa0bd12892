package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of the CPU times in /proc/PID/stat. The kernel reports
// them in USER_HZ, which is 100 on every Linux architecture Go supports
// (sysconf(_SC_CLK_TCK) would need cgo to ask).
const userHZ = 100

// ProcStat holds the CPU times of /proc/PID/stat, in clock ticks.
type ProcStat struct {
	Utime, Stime   uint64 // the process (all its threads)
	Cutime, Cstime uint64 // its waited-for children
}

// CPU returns user+system time of the process and its children.
func (s ProcStat) CPU() time.Duration {
	ticks := s.Utime + s.Stime + s.Cutime + s.Cstime
	return time.Duration(ticks) * (time.Second / userHZ)
}

// ParseStat parses the contents of /proc/PID/stat (proc(5)). The command
// name (field 2) may hold spaces and parentheses, so fields are counted
// from the last ')'.
func ParseStat(b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, errors.New("parse stat: no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime..cstime are fields 14..17.
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("parse stat: %d fields after the command name, want at least 15", len(f))
	}
	var v [4]uint64
	for k := range v {
		n, err := strconv.ParseUint(f[11+k], 10, 64)
		if err != nil {
			return ProcStat{}, fmt.Errorf("parse stat field %d: %w", 14+k, err)
		}
		v[k] = n
	}
	return ProcStat{Utime: v[0], Stime: v[1], Cutime: v[2], Cstime: v[3]}, nil
}

// ProcStatus holds the memory figures of /proc/PID/status, in bytes.
type ProcStatus struct {
	VmHWM uint64 // peak resident set size
	VmRSS uint64 // current resident set size
}

// ParseStatus parses the VmHWM and VmRSS lines of /proc/PID/status.
func ParseStatus(b []byte) (ProcStatus, error) {
	var s ProcStatus
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "VmHWM":
			dst = &s.VmHWM
		case "VmRSS":
			dst = &s.VmRSS
		default:
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return ProcStatus{}, fmt.Errorf("parse status %s: unexpected value %q", key, val)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return ProcStatus{}, fmt.Errorf("parse status %s: %w", key, err)
		}
		*dst = n * 1024
		seen++
	}
	if seen != 2 {
		return ProcStatus{}, errors.New("parse status: VmHWM or VmRSS missing (kernel thread or exited process?)")
	}
	return s, nil
}

// process is a child the harness started and must stop.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when Wait returned; then err is set
	err    error
}

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 3 * time.Second

// sched is where and how eagerly a child runs.
type sched struct {
	cpu  int  // pin to this CPU; < 0: no pinning
	nice int  // niceness; 0: inherit
	rt   bool // SCHED_RR at rtPriority instead of nice
}

// wrap resolves argv[0] and prefixes taskset and nice as s asks. Both exec
// the command in place, so the PID stays the command's own.
func (s sched) wrap(argv []string) ([]string, error) {
	bin, err := lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	out := []string{}
	if s.cpu >= 0 {
		out = append(out, "taskset", "--cpu-list", strconv.Itoa(s.cpu))
	}
	switch {
	case s.rt:
		out = append(out, "chrt", "--rr", strconv.Itoa(rtPriority))
	case s.nice != 0:
		out = append(out, "nice", "-n", strconv.Itoa(s.nice))
	}
	return append(append(out, bin), argv[1:]...), nil
}

// startProcess runs argv with stdout and stderr in logPath, scheduled as s
// says. The child is killed if the harness dies.
func startProcess(name string, argv []string, s sched, logPath string) (*process, error) {
	argv, err := s.wrap(argv)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &process{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// alive returns an error if the process has exited.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v (log: %s)", p.name, p.err, p.log.Name())
	default:
		return nil
	}
}

func (p *process) stat() (ProcStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid()), "stat"))
	if err != nil {
		return ProcStat{}, fmt.Errorf("%s: %w", p.name, err)
	}
	return ParseStat(b)
}

func (p *process) status() (ProcStatus, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid()), "status"))
	if err != nil {
		return ProcStatus{}, fmt.Errorf("%s: %w", p.name, err)
	}
	return ParseStatus(b)
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func (p *process) stop() {
	defer p.log.Close()
	if p.alive() != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// pinSelf moves every thread of the harness to cpu and returns a function
// restoring the previous affinity. Threads created later inherit the
// affinity of the thread creating them, so the whole process stays on cpu.
func pinSelf(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("get affinity: %w", err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := setAllThreads(&set); err != nil {
		return nil, fmt.Errorf("pin harness to CPU %d: %w", cpu, err)
	}
	return func() { _ = setAllThreads(&old) }, nil
}

// niceSelf sets the niceness of every thread of the harness and returns a
// function restoring the previous one.
func niceSelf(nice int) (restore func(), err error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return nil, fmt.Errorf("get niceness: %w", err)
	}
	old := 20 - raw // the raw system call returns 20-nice (getpriority(2))
	if err := forAllThreads(func(tid int) error { return unix.Setpriority(unix.PRIO_PROCESS, tid, nice) }); err != nil {
		return nil, fmt.Errorf("set niceness %d: %w", nice, err)
	}
	return func() {
		_ = forAllThreads(func(tid int) error { return unix.Setpriority(unix.PRIO_PROCESS, tid, old) })
	}, nil
}

func setAllThreads(set *unix.CPUSet) error {
	return forAllThreads(func(tid int) error { return unix.SchedSetaffinity(tid, set) })
}

// forAllThreads calls f for every thread of the harness.
func forAllThreads(f func(tid int) error) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := f(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// rtPriority is the SCHED_RR priority of the measured runs: the lowest, so
// the kernel's own real-time threads still come first.
const rtPriority = 1

// setRealtime puts every thread of pid (0: the harness itself) under
// SCHED_RR at rtPriority when on, or back under SCHED_NORMAL with nice.
// Threads created later inherit the policy of the thread creating them.
func setRealtime(pid int, on bool, nice int) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: int32(nice)}
	if on {
		attr = unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_RR, Priority: rtPriority}
	}
	dir := "/proc/self/task"
	if pid != 0 {
		dir = filepath.Join("/proc", strconv.Itoa(pid), "task")
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}
