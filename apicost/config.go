package apicost

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// Config is one study. DefaultConfig holds the values of the main run
// (docs/apiserver-cost.md); the smoke test shrinks them.
type Config struct {
	// Nodes are the simulated node counts, ascending; at least one. Each
	// count gets two steady-state windows (kube-proxy's watch set alone, then
	// with nodedns backends added); the largest also gets the bursts.
	Nodes []int
	// Services is the number of ClusterIP Services, each with one
	// EndpointSlice of EndpointsPerService endpoints.
	Services            int
	EndpointsPerService int
	// ChurnEndpoints is the size of the Deployment whose endpoints are
	// replaced one by one, every ChurnInterval, in a single EndpointSlice
	// (a rolling update that never ends). 0 turns churn off.
	ChurnEndpoints int
	ChurnInterval  time.Duration
	// CompareAll adds, at each node count, a window with the backends'
	// endpointslices all (the kubernetes plugin's full watch) before the
	// default (spec).
	CompareAll bool
	// ChurnKinds adds, at the largest node count, a window with a headless
	// Service's slice rolling and one with a selector-less Service's slice
	// (written by another controller), each instead of the ClusterIP churn.
	ChurnKinds bool
	// Settle is the wait after processes start (and their caches synced)
	// before a steady-state window opens.
	Settle time.Duration
	// Window is the length of a steady-state window.
	Window time.Duration
	// BurstWindow is how long after a rollout or an API server restart the
	// burst is measured.
	BurstWindow time.Duration
	// ReadyTimeout bounds the wait for all agents of a fleet to sync.
	ReadyTimeout time.Duration
	// BackendBinary is nodedns-backend (bin/nodedns-backend).
	BackendBinary string
	// WatchCommand starts one kube-proxy watch-set process; the study appends
	// --kubeconfig, --node and --synced-file. WatchEnv is added to its
	// environment.
	WatchCommand []string
	WatchEnv     []string
	// WatchList compares client-go's streaming lists on and off for the
	// nodedns rollout and the relist after an API server restart.
	WatchList bool
	// RestartBaselines adds the API server restarts with only kube-proxy's
	// watches and with none, which separate nodedns's relist from the API
	// server's own start.
	RestartBaselines bool
	// Calibrate runs one real kube-proxy (nftables mode, in a network
	// namespace; root) and one watch-set process, and compares the watches
	// each opens.
	Calibrate bool
	// Simulate, when not empty, replaces the process windows: for each
	// node count (ascending) and each Design, one simulator process runs
	// that many simulated nodes (RunSimWatchers) through an idle window, a
	// churn window and an API server restart. Nodes is then unused.
	Simulate []int
	// SimCalibrate is the node count at which real agents and simulated
	// nodes of each design are measured side by side; 0: none.
	SimCalibrate int
	// SimRamp is how many simulated nodes start at once (memory of the
	// initial lists); 0: all.
	SimRamp int
	// Plot, if set, is where the -simulate figure (PNG) goes.
	Plot string
	// SimCommand starts one simulator process; the study appends
	// --kubeconfig, --design, --nodes, --ramp and --status-file.
	SimCommand []string
	// Log receives progress lines. Default: discarded.
	Logf func(format string, args ...any)
	// Out receives the report tables (Markdown) as they are measured.
	Out io.Writer
}

// DefaultConfig returns the main run's parameters.
func DefaultConfig() Config {
	return Config{
		Nodes:               []int{10, 30, 50},
		Services:            1000,
		EndpointsPerService: 5,
		ChurnEndpoints:      50,
		ChurnInterval:       200 * time.Millisecond,
		CompareAll:          true,
		ChurnKinds:          true,
		Settle:              20 * time.Second,
		Window:              60 * time.Second,
		BurstWindow:         30 * time.Second,
		ReadyTimeout:        5 * time.Minute,
		BackendBinary:       "bin/nodedns-backend",
		WatchList:           true,
		RestartBaselines:    true,
		Calibrate:           true,
	}
}

// Validate reports the first inconsistent field.
func (c *Config) Validate() error {
	if len(c.Simulate) > 0 {
		if !slices.IsSorted(c.Simulate) || c.Simulate[0] < 1 {
			return fmt.Errorf("simulate %v: want positive counts in ascending order", c.Simulate)
		}
		// One connection per simulated node, in the simulator and in
		// kube-apiserver: stay well inside a file descriptor limit of 20,000.
		if max := c.Simulate[len(c.Simulate)-1]; max > 10000 {
			return fmt.Errorf("simulate %d: at most 10000 nodes", max)
		}
		if c.SimCalibrate < 0 || c.SimCalibrate > 500 {
			return fmt.Errorf("sim-calibrate %d: want 0..500 real processes", c.SimCalibrate)
		}
		if len(c.SimCommand) == 0 {
			return errors.New("sim command: give the command of a simulator process")
		}
		if c.ChurnEndpoints == 0 {
			return errors.New("simulate: the churn windows need -churn-endpoints > 0")
		}
	} else {
		if len(c.Nodes) == 0 {
			return errors.New("nodes: give at least one node count")
		}
		if !slices.IsSorted(c.Nodes) || c.Nodes[0] < 1 {
			return fmt.Errorf("nodes %v: want positive counts in ascending order", c.Nodes)
		}
		// Each node count is a separate process of each kind, and the node
		// addresses of the calibration node come from a /24.
		if max := c.Nodes[len(c.Nodes)-1]; max > 500 {
			return fmt.Errorf("nodes %d: at most 500 processes per kind", max)
		}
	}
	if c.Services < 1 || c.EndpointsPerService < 1 {
		return fmt.Errorf("services %d × endpoints %d: want at least 1 each", c.Services, c.EndpointsPerService)
	}
	if c.ChurnEndpoints < 0 || (c.ChurnEndpoints > 0 && c.ChurnInterval <= 0) {
		return fmt.Errorf("churn %d endpoints every %v: want a positive interval", c.ChurnEndpoints, c.ChurnInterval)
	}
	if c.Window <= 0 || c.BurstWindow <= 0 || c.Settle < 0 || c.ReadyTimeout <= 0 {
		return errors.New("window, burst window and ready timeout must be positive, settle not negative")
	}
	if c.BackendBinary == "" {
		return errors.New("backend binary: give the path of nodedns-backend")
	}
	if len(c.WatchCommand) == 0 {
		return errors.New("watch command: give the command of a kube-proxy watch-set process")
	}
	return nil
}

// maxNodes is the largest node count the study runs: the Node objects it
// creates.
func (c *Config) maxNodes() int {
	n := c.SimCalibrate
	if len(c.Simulate) > 0 {
		return max(n, c.Simulate[len(c.Simulate)-1])
	}
	return max(n, c.Nodes[len(c.Nodes)-1])
}
