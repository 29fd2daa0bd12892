package apicost

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nodedns/nodedns/testbed"
)

// kind is what an agent process runs.
type kind string

const (
	// kindBackend is nodedns-backend with the kubernetes plugin.
	kindBackend kind = "nodedns-backend"
	// kindProxyWatch opens kube-proxy's informers and nothing else.
	kindProxyWatch kind = "kube-proxy-watch"
	// kindSim is one process of simulated nodes (RunSimWatchers).
	kindSim kind = "simulated nodes"
)

// readyPoll is how often a fleet checks that its agents synced: short against
// start-ups of seconds, long enough to stay off the shared cores.
const readyPoll = 250 * time.Millisecond

// agent is one simulated node's process.
type agent struct {
	node  string
	proc  *testbed.Process
	ready func() bool // true once its caches synced
	// status is a simulator's status file (kindSim only).
	status string
}

// fleet is the processes of one kind, one per simulated node.
type fleet struct {
	kind kind
	dir  string
	// start starts the agent of node i (generation gen, for unique names).
	start func(i, gen int) (*agent, error)

	mu     sync.Mutex // guards agents and gen
	agents []*agent
	gen    int
}

// grow starts agents until there are n; it returns when they all synced.
func (f *fleet) grow(ctx context.Context, n int, timeout time.Duration) error {
	f.mu.Lock()
	have, gen := len(f.agents), f.gen
	f.mu.Unlock()
	var started []*agent
	for i := have; i < n; i++ {
		a, err := f.start(i, gen)
		if err != nil {
			return err
		}
		started = append(started, a)
		f.mu.Lock()
		f.agents = append(f.agents, a)
		f.mu.Unlock()
	}
	return f.waitSynced(ctx, started, timeout)
}

// waitSynced polls the agents until each reports synced.
func (f *fleet) waitSynced(ctx context.Context, agents []*agent, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := append([]*agent(nil), agents...)
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for len(pending) > 0 {
		rest := pending[:0]
		for _, a := range pending {
			if done, err := a.proc.Exited(); done {
				return fmt.Errorf("%s of %s exited: %v\n%s", f.kind, a.node, err, a.proc.LogTail())
			}
			if !a.ready() {
				rest = append(rest, a)
			}
		}
		pending = rest
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d %s processes not synced: %w\n%s", len(pending), f.kind, ctx.Err(), pending[0].proc.LogTail())
		case <-t.C:
		}
	}
	return nil
}

// stopAll stops every agent at once and forgets them.
func (f *fleet) stopAll() error {
	f.mu.Lock()
	agents := f.agents
	f.agents = nil
	f.gen++
	f.mu.Unlock()
	var g errgroup.Group
	for _, a := range agents {
		g.Go(a.proc.Stop)
	}
	return g.Wait()
}

// rollout replaces all n agents at once, as a DaemonSet rollout with
// maxUnavailable=100%: every process stops, then every new one starts.
// It returns when the new ones are started, not synced.
func (f *fleet) rollout(n int) ([]*agent, error) {
	if err := f.stopAll(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	gen := f.gen
	f.mu.Unlock()
	var started []*agent
	for i := range n {
		a, err := f.start(i, gen)
		if err != nil {
			return nil, err
		}
		started = append(started, a)
	}
	f.mu.Lock()
	f.agents = started
	f.mu.Unlock()
	return started, nil
}

// pids are the process ids of the running agents.
func (f *fleet) pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	pids := make([]int, len(f.agents))
	for i, a := range f.agents {
		pids[i] = a.proc.PID()
	}
	return pids
}

// size is the number of running agents.
func (f *fleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.agents)
}

// studyCorefile is the backend's Corefile in the study: the production
// nodedns_kubernetes stanza (backend/Corefile) with its endpointslices mode
// and a kubeconfig, and /ready to know
// when its informers synced. No forward, cache or second listener: they do
// not talk to the API server.
const studyCorefile = `.:%d {
    bind 127.0.0.1
    ready 127.0.0.1:%d
    nodedns_kubernetes cluster.local in-addr.arpa ip6.arpa {
        endpointslices %s
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
}
`

// stockMode is the backends' "endpointslices" value that stands for a stock
// CoreDNS instead: the kubernetes plugin with kubeadm's Corefile stanza
// (pods insecure, fallthrough, ttl 30), which watches every EndpointSlice.
const stockMode = "stock"

// stockCorefile is studyCorefile with the stock kubernetes plugin as
// kubeadm configures it, and a kubeconfig.
const stockCorefile = `.:%d {
    bind 127.0.0.1
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
}
`

// backendFleet runs nodedns-backend processes with kubeconfig, each on its
// own two loopback ports (DNS, ready). watchList sets client-go's
// WatchListClient feature gate (streaming lists) for processes started after
// the change, and endpointSlices their endpointslices mode.
func backendFleet(dir, binary, kubeconfig string, watchList *bool, endpointSlices *string) *fleet {
	f := &fleet{kind: kindBackend, dir: dir}
	hc := &http.Client{Timeout: time.Second}
	f.start = func(i, gen int) (*agent, error) {
		node := nodeName(i)
		name := fmt.Sprintf("backend-%s-g%d", node, gen)
		dnsPort, err := freePort()
		if err != nil {
			return nil, err
		}
		readyPort, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, name+".Corefile")
		text := fmt.Appendf(nil, studyCorefile, dnsPort, readyPort, *endpointSlices, kubeconfig)
		if *endpointSlices == stockMode {
			text = fmt.Appendf(nil, stockCorefile, dnsPort, readyPort, kubeconfig)
		}
		if err := os.WriteFile(conf, text, 0o644); err != nil {
			return nil, fmt.Errorf("write Corefile: %w", err)
		}
		env := []string{"KUBE_FEATURE_WatchListClient=" + strconv.FormatBool(*watchList)}
		p, err := testbed.StartProcess(dir, name, []string{binary, "-conf", conf, "-quiet"}, env)
		if err != nil {
			return nil, err
		}
		url := "http://127.0.0.1:" + strconv.Itoa(readyPort) + "/ready"
		ready := func() bool {
			resp, err := hc.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		return &agent{node: node, proc: p, ready: ready}, nil
	}
	return f
}

// proxyWatchFleet runs kube-proxy watch-set processes (RunProxyWatch), one
// per node, each as that node.
func proxyWatchFleet(dir string, command, env []string, kubeconfig string) *fleet {
	f := &fleet{kind: kindProxyWatch, dir: dir}
	f.start = func(i, gen int) (*agent, error) {
		node := nodeName(i)
		name := fmt.Sprintf("kube-proxy-watch-%s-g%d", node, gen)
		synced := filepath.Join(dir, name+".synced")
		argv := append(append([]string(nil), command...),
			"--kubeconfig="+kubeconfig, "--node="+node, "--synced-file="+synced)
		p, err := testbed.StartProcess(dir, name, argv, env)
		if err != nil {
			return nil, err
		}
		ready := func() bool { _, err := os.Stat(synced); return err == nil }
		return &agent{node: node, proc: p, ready: ready}, nil
	}
	return f
}

// nodeName is the Node object of simulated node i.
func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
