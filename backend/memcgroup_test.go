package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// memCgroup is the memory cgroup of one container of the study: its
// process is started inside it, so that every page it touches, its
// binary's file pages included, is charged to it as to a container's
// cgroup on a node. kubelet's working set is the cgroup's usage minus its
// inactive file pages (cgroup v1: memory.usage_in_bytes and
// total_inactive_file; v2: memory.current and inactive_file).
type memCgroup struct {
	dir string
	v2  bool
}

// memCgroupRoot returns the directory under which the study creates its
// cgroups: a new one below the test's own memory cgroup. It reports why
// when it cannot (no memory controller, not root, cgroup v2 without a
// delegated subtree).
func memCgroupRoot(t *testing.T) (dir string, v2 bool, err error) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	var v1Path, v2Path string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2Path = f[2]
		case strings.Contains(","+f[1]+",", ",memory,"):
			v1Path = f[2]
		}
	}
	var base string
	switch {
	case v1Path != "":
		base = filepath.Join("/sys/fs/cgroup/memory", v1Path)
	case v2Path != "":
		// Processes may only sit in leaves: the study's cgroups go beside
		// the test's own, under its parent.
		base, v2 = filepath.Join("/sys/fs/cgroup", filepath.Dir(v2Path)), true
	default:
		return "", false, fmt.Errorf("no memory cgroup in /proc/self/cgroup")
	}
	dir, err = os.MkdirTemp(base, "nodedns-memstudy-")
	if err != nil {
		return "", false, fmt.Errorf("create a cgroup under %s: %w", base, err)
	}
	if v2 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			_ = os.Remove(dir)
			return "", false, fmt.Errorf("enable the memory controller in %s: %w", dir, err)
		}
	}
	// Removed once the containers' cgroups are (cleanups run last first).
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir, v2, nil
}

// newMemCgroup creates the cgroup name under root; it is removed when the
// test ends, after the processes started in it have stopped (register it
// before starting them).
func newMemCgroup(t *testing.T, root string, v2 bool, name string) *memCgroup {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("memory cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return &memCgroup{dir: dir, v2: v2}
}

// wrap returns cmd started inside the cgroup: a shell moves itself in and
// execs the command, so the process's first page is charged there.
func (c *memCgroup) wrap(cmd *exec.Cmd) *exec.Cmd {
	w := exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.dir, "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)...)
	w.Env, w.Dir = cmd.Env, cmd.Dir
	return w
}

func (c *memCgroup) read(file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	return strings.TrimSpace(string(b)), err
}

// cgMemory is a cgroup's memory in MiB.
type cgMemory struct {
	usage, workingSet, inactiveFile, anon, file, peak float64
	ooms                                              int
}

// memory reads the cgroup's usage, working set and peak.
func (c *memCgroup) memory() (cgMemory, error) {
	var m cgMemory
	usageFile, peakFile, statPrefix := "memory.usage_in_bytes", "memory.max_usage_in_bytes", "total_"
	anonKey, fileKey := "rss", "cache"
	if c.v2 {
		usageFile, peakFile, statPrefix = "memory.current", "memory.peak", ""
		anonKey, fileKey = "anon", "file"
	}
	v, err := c.read(usageFile)
	if err != nil {
		return m, err
	}
	usage, _ := strconv.ParseFloat(v, 64)
	if v, err := c.read(peakFile); err == nil {
		p, _ := strconv.ParseFloat(v, 64)
		m.peak = p / (1 << 20)
	}
	f, err := os.Open(filepath.Join(c.dir, "memory.stat"))
	if err != nil {
		return m, err
	}
	defer f.Close()
	stat := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseFloat(v, 64)
		stat[k] = n
	}
	inactive := stat[statPrefix+"inactive_file"]
	m.usage = usage / (1 << 20)
	m.inactiveFile = inactive / (1 << 20)
	m.workingSet = max(usage-inactive, 0) / (1 << 20)
	m.anon = stat[statPrefix+anonKey] / (1 << 20)
	m.file = stat[statPrefix+fileKey] / (1 << 20)
	m.ooms = c.oomKills()
	return m, nil
}

// oomKills is the number of OOM kills in the cgroup so far.
func (c *memCgroup) oomKills() int {
	file, key := "memory.oom_control", "oom_kill"
	if c.v2 {
		file = "memory.events"
	}
	v, err := c.read(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(v, "\n") {
		if k, n, ok := strings.Cut(line, " "); ok && k == key {
			i, _ := strconv.Atoi(n)
			return i
		}
	}
	return 0
}

// resetPeak starts the cgroup's peak afresh (v1; v2 kernels from 6.12).
func (c *memCgroup) resetPeak() error {
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	return os.WriteFile(filepath.Join(c.dir, file), []byte("0"), 0)
}

// setLimit sets the cgroup's memory limit in bytes; 0 removes it.
func (c *memCgroup) setLimit(bytes int64) error {
	file, v := "memory.limit_in_bytes", "-1"
	if c.v2 {
		file, v = "memory.max", "max"
	}
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	return os.WriteFile(filepath.Join(c.dir, file), []byte(v), 0)
}

// copyBinary copies bin to a file of its own in a fresh directory and drops
// the copy's pages from the page cache, so that the process running it
// faults them in from disk and they are charged to its own cgroup: on a
// node each container's image holds its own file, and processes sharing
// one file would show each other's pages.
func copyBinary(t *testing.T, bin string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(bin))
	in, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(out.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
