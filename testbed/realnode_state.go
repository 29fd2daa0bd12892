package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Real nodes leave state outside their testbed directory that the kernel
// does not reclaim when the test process dies: network namespaces (held by
// files in /run/netns), cgroup directories (one tree per run, under
// cgroupPrefix in every v1 hierarchy), and container processes with their
// shims, which containerd daemonizes (so Pdeathsig does not reach them).
// Each run records what it made in a state file under stateDir, with its
// own pid and start time; a later run whose recorder is gone removes it
// all (removeLeftovers), and Stop removes it at the end of a run.

// stateDir holds one JSON file per running (or crashed) real-node testbed.
// /run is a tmpfs: after a reboot the state and what it names are gone.
const stateDir = "/run/nodedns-realnode"

// cgroupPrefix starts the name of each run's cgroup tree, directly under
// the root of every hierarchy.
const cgroupPrefix = "nodedns-rn-"

// cgroupFS is where the host mounts its cgroup v1 hierarchies.
const cgroupFS = "/sys/fs/cgroup"

// runState is what one run made outside its directory.
type runState struct {
	PID       int      `json:"pid"`
	StartTime string   `json:"start_time"` // /proc/<pid>/stat field 22
	Cgroup    string   `json:"cgroup"`     // tree name, cgroupPrefix + token
	Netns     []string `json:"netns"`
	Dirs      []string `json:"dirs"`
	file      string
}

func newRunState() (*runState, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("real nodes: %w", err)
	}
	st, err := procStartTime(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("real nodes: %w", err)
	}
	tok := randomToken()[:8]
	s := &runState{PID: os.Getpid(), StartTime: st, Cgroup: cgroupPrefix + tok, file: filepath.Join(stateDir, tok+".json")}
	return s, s.save()
}

func (s *runState) save() error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("real nodes: state: %w", err)
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("real nodes: state: %w", err)
	}
	if err := os.Rename(tmp, s.file); err != nil {
		return fmt.Errorf("real nodes: state: %w", err)
	}
	return nil
}

// procStartTime returns field 22 of /proc/<pid>/stat: with the pid, it
// names a process uniquely across pid reuse.
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return f[19], nil
}

func (s *runState) alive() bool {
	st, err := procStartTime(s.PID)
	return err == nil && st == s.StartTime
}

// removeLeftovers removes what earlier runs left behind: the state of
// every run whose process is gone, and cgroup trees no live run claims.
// It returns what it removed, for the test log.
func removeLeftovers(ctx context.Context) ([]string, error) {
	files, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	live := map[string]bool{}
	var removed []string
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s runState
		if err := json.Unmarshal(b, &s); err != nil {
			errs = append(errs, os.Remove(f))
			continue
		}
		s.file = f
		if s.alive() {
			live[s.Cgroup] = true
			continue
		}
		removed = append(removed, fmt.Sprintf("run of pid %d: cgroup %s, netns %v, dirs %v", s.PID, s.Cgroup, s.Netns, s.Dirs))
		errs = append(errs, s.remove(ctx))
	}
	// A tree whose state file is lost (a crash between mkdir and save).
	trees, _ := filepath.Glob(filepath.Join(cgroupFS, "pids", cgroupPrefix+"*"))
	for _, t := range trees {
		name := filepath.Base(t)
		if live[name] {
			continue
		}
		removed = append(removed, "cgroup "+name)
		errs = append(errs, removeCgroupTree(name))
	}
	return removed, errors.Join(errs...)
}

// remove kills the run's processes, deletes its cgroups, network
// namespaces and directories, then its state file.
func (s *runState) remove(ctx context.Context) error {
	errs := []error{removeCgroupTree(s.Cgroup)}
	for _, ns := range s.Netns {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			errs = append(errs, ipCmd(ctx, "netns", "delete", ns))
		}
	}
	for _, d := range s.Dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove leftovers of pid %d: %w", s.PID, err)
	}
	if err := os.Remove(s.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// leftovers lists what of s still exists: for a test to check after Stop.
func (s *runState) leftovers() []string {
	var out []string
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, s.Cgroup)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, s.Cgroup))
		}
	}
	for _, ns := range s.Netns {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			out = append(out, "netns "+ns)
		}
	}
	for _, d := range s.Dirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, "dir "+d)
		}
	}
	if _, err := os.Stat(s.file); err == nil {
		out = append(out, "state "+s.file)
	}
	for _, pid := range pidsInCgroup(s.Cgroup) {
		out = append(out, "process "+strconv.Itoa(pid))
	}
	return out
}

// cgroupHierarchies returns the mount points of the host's cgroup v1
// hierarchies (not the cgroup2 "unified" one: see mountScript).
func cgroupHierarchies() []string {
	var out []string
	for _, m := range cgroupMounts() {
		out = append(out, m.dir)
	}
	return out
}

type cgroupMount struct {
	dir  string // mount point, under cgroupFS
	opts string // the subsystems, or name=systemd
}

// cgroupMounts reads the v1 cgroup mounts from /proc/self/mounts.
func cgroupMounts() []cgroupMount {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[2] != "cgroup" || !strings.HasPrefix(fs[1], cgroupFS+"/") {
			continue
		}
		var opts []string
		for _, o := range strings.Split(fs[3], ",") {
			switch o {
			case "rw", "ro", "relatime", "nosuid", "nodev", "noexec":
			default:
				opts = append(opts, o)
			}
		}
		out = append(out, cgroupMount{dir: fs[1], opts: strings.Join(opts, ",")})
	}
	return out
}

// pidsInCgroup returns every process in the tree name of the pids
// hierarchy (where daemons and, through kubelet's cgroupRoot, containers
// are placed).
func pidsInCgroup(name string) []int {
	var pids []int
	root := filepath.Join(cgroupFS, "pids", name)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, l := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(l); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupTree SIGKILLs every process in the tree name, waits for them
// to leave, and removes its directories, deepest first, in every hierarchy.
func removeCgroupTree(name string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := pidsInCgroup(name)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v do not exit", name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			// A cgroup empties a moment after its last process is reaped.
			var err error
			for try := 0; try < 50; try++ {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
