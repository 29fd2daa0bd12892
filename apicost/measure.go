package apicost

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// rssSampleInterval is how often the API server's RSS is sampled during a
// window, next to VmHWM (which a restarted process starts afresh).
const rssSampleInterval = 500 * time.Millisecond

// Usage is the CPU and memory of a fleet of agent processes in a window.
type Usage struct {
	Procs  int     // processes running at the end
	CPU    float64 // CPU seconds used in the window, all processes
	RSS    float64 // MiB at the end, all processes
	MaxRSS float64 // MiB at the end, the largest process
}

// Result is one measured window.
type Result struct {
	Label   string // what ran or happened
	Nodes   int    // simulated nodes
	Seconds float64

	APICPU     float64 // kube-apiserver CPU seconds in the window
	APIRSS     float64 // MiB at the end
	APIPeakRSS float64 // MiB, highest in the window
	Restarted  bool    // kube-apiserver restarted: counters and CPU count from its start

	Watches     float64 // open watches on the watched resources at the end
	WatchesBy   map[string]float64
	WatchEvents float64 // sent in the window
	WatchBytes  float64
	Lists       float64 // LIST requests in the window
	ListBytes   float64

	Backends   Usage
	ProxyWatch Usage
	Sim        Usage // simulator processes
	// Terminated is the watchers the watch cache closed for falling behind.
	Terminated float64

	ChurnUpdates float64
	// Churn is the kind of Service whose slice rolled: ChurnClusterIP
	// unless a churn-kind window said otherwise.
	Churn string
	// SyncedAfter is how long the restarted agents took to sync (rollouts);
	// 0 when not measured.
	SyncedAfter time.Duration
}

// CPUCores is APICPU per second of window.
func (r Result) CPUCores() float64 { return r.APICPU / r.Seconds }

// snapshot is the state of the API server and the agents at one instant.
type snapshot struct {
	at      time.Time
	apiPID  int
	api     procUsage
	c       apiCounters
	fleets  map[kind]map[int]procUsage // by kind, by pid
	updates int64
}

func (s *study) snapshot(ctx context.Context) (snapshot, error) {
	snap := snapshot{at: time.Now(), apiPID: s.tb.APIServerPID(), fleets: map[kind]map[int]procUsage{}}
	var err error
	if snap.api, err = readProc(snap.apiPID); err != nil {
		return snap, err
	}
	text, err := s.tb.Metrics(ctx)
	if err != nil {
		return snap, err
	}
	snap.c = apiserverCounters(text)
	for _, f := range []*fleet{s.backends, s.proxies, s.sims} {
		if f == nil {
			continue
		}
		m := map[int]procUsage{}
		for _, pid := range f.pids() {
			u, err := readProc(pid)
			if err != nil {
				return snap, fmt.Errorf("%s: %w", f.kind, err)
			}
			m[pid] = u
		}
		snap.fleets[f.kind] = m
	}
	for _, ch := range s.churns {
		snap.updates += ch.updates.Load()
	}
	return snap, nil
}

// measure runs action (may be nil), then waits d, and returns what changed
// between the snapshot before the action and the end of the wait. When the
// API server restarted, its CPU and counters are those of the new process
// since its start. synced, if not nil, is waited for in the background and
// its duration recorded.
func (s *study) measure(ctx context.Context, label string, nodes int, d time.Duration, action func() error, synced func(context.Context) error) (Result, error) {
	r := Result{Label: label, Nodes: nodes}
	s0, err := s.snapshot(ctx)
	if err != nil {
		return r, err
	}
	if err := resetPeak(s0.apiPID); err != nil {
		s.logf("%v (peak RSS from samples only)", err)
	}

	// Peak RSS by pid: after a restart only the new process's samples count
	// (the old one may still hold the memory of an earlier burst).
	peak := map[int]float64{}
	var mu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(rssSampleInterval)
		defer t.Stop()
		for {
			if pid := s.tb.APIServerPID(); pid != 0 {
				if u, err := readProc(pid); err == nil {
					mu.Lock()
					peak[pid] = math.Max(peak[pid], u.RSS)
					mu.Unlock()
				}
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer func() { stopSampling(); wg.Wait() }()

	if action != nil {
		if err := action(); err != nil {
			return r, fmt.Errorf("%s: %w", label, err)
		}
	}
	actionDone := time.Now()
	syncErr := make(chan error, 1)
	if synced != nil {
		go func() {
			err := synced(ctx)
			if err == nil {
				r.SyncedAfter = time.Since(s0.at)
			}
			syncErr <- err
		}()
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(time.Until(actionDone.Add(d))):
	}
	if synced != nil {
		if err := <-syncErr; err != nil {
			return r, fmt.Errorf("%s: %w", label, err)
		}
	}
	s1, err := s.snapshot(ctx)
	if err != nil {
		return r, err
	}
	stopSampling()
	wg.Wait()

	base0 := s0
	if s1.apiPID != s0.apiPID {
		r.Restarted = true
		base0.api, base0.c = procUsage{}, apiCounters{}
	}
	r.Seconds = s1.at.Sub(s0.at).Seconds()
	r.APICPU = s1.api.CPU - base0.api.CPU
	r.APIRSS = s1.api.RSS
	r.APIPeakRSS = math.Max(peak[s1.apiPID], s1.api.HWM)
	r.Watches, r.WatchesBy = s1.c.Watches, s1.c.WatchesBy
	r.WatchEvents = s1.c.WatchEvents - base0.c.WatchEvents
	r.WatchBytes = s1.c.WatchBytes - base0.c.WatchBytes
	r.Lists = s1.c.Lists - base0.c.Lists
	r.ListBytes = s1.c.ListBytes - base0.c.ListBytes
	r.Backends = fleetUsage(s0.fleets[kindBackend], s1.fleets[kindBackend])
	r.ProxyWatch = fleetUsage(s0.fleets[kindProxyWatch], s1.fleets[kindProxyWatch])
	r.Sim = fleetUsage(s0.fleets[kindSim], s1.fleets[kindSim])
	r.Terminated = s1.c.Terminated - base0.c.Terminated
	r.ChurnUpdates = float64(s1.updates - s0.updates)
	return r, nil
}

// fleetUsage is the CPU the processes running at the end used since the
// start (all of it for processes started in between) and their memory.
func fleetUsage(before, after map[int]procUsage) Usage {
	var u Usage
	for pid, a := range after {
		u.Procs++
		u.CPU += a.CPU - before[pid].CPU
		u.RSS += a.RSS
		u.MaxRSS = math.Max(u.MaxRSS, a.RSS)
	}
	return u
}
