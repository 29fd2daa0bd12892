package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodedns/nodedns/testbed"
)

// traceEnv names a directory where a real-node test that calls
// startTrace records, with millisecond timestamps, the kube-dns
// EndpointSlices as kube-proxy sees them, every node's conntrack events
// for UDP port 53, and the changes of every node's counters of dropped
// packets (conntrack -S, the DROP and REJECT rules' packets): the
// evidence for lookups lost while the endpoints change. Unset (the
// default), startTrace does nothing.
const traceEnv = "NODEDNS_E2E_TRACE"

// startTrace starts the trace of traceEnv's directory, if set, until ctx
// ends or the test does.
func startTrace(ctx context.Context, t *testing.T, tb *testbed.Testbed, nodes []*testbed.RealNode) {
	dir := os.Getenv(traceEnv)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	t.Logf("trace: EndpointSlices and conntrack events in %s", dir)
	for _, n := range nodes {
		f, err := os.Create(filepath.Join(dir, "conntrack-"+n.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := n.Command(ctx, "conntrack", "-E", "-p", "udp", "-o", "timestamp,id")
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); _ = cmd.Wait(); f.Close() })
	}
	for _, n := range nodes {
		traceCounters(ctx, t, n, filepath.Join(dir, "counters-"+n.Name+".log"))
	}
	f, err := os.Create(filepath.Join(dir, "endpointslices.log"))
	if err != nil {
		t.Fatal(err)
	}
	// A list every 100 ms, each change written: a watch of this testbed's
	// API server may end (a resource version ahead of its cache) and
	// would need a reflector to resume; the trace wants no such gap.
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]string{}
		for ctx.Err() == nil {
			list, err := tb.Client().DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
			now := time.Now().UTC().Format("15:04:05.000")
			if err != nil {
				fmt.Fprintf(f, "%s list: %v\n", now, err)
			} else {
				seen := map[string]bool{}
				for i := range list.Items {
					s := &list.Items[i]
					seen[s.Name] = true
					if d := describeSlice(s, watch.Modified); last[s.Name] != d {
						last[s.Name] = d
						fmt.Fprintf(f, "%s %s %s\n", now, s.Name, d)
					}
				}
				for name := range last {
					if !seen[name] {
						delete(last, name)
						fmt.Fprintf(f, "%s %s deleted\n", now, name)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; f.Close() })
}

// describeSlice prints a slice's endpoints as address[node]:r/s/t flags
// (ready, serving, terminating) and its ports.
func describeSlice(s *discoveryv1.EndpointSlice, typ watch.EventType) string {
	if typ == watch.Deleted {
		return "-"
	}
	var eps []string
	for _, e := range s.Endpoints {
		flag := func(b *bool, c string) string {
			if b != nil && *b {
				return c
			}
			return "-"
		}
		node := ""
		if e.NodeName != nil {
			node = *e.NodeName
		}
		eps = append(eps, fmt.Sprintf("%s[%s]:%s%s%s", strings.Join(e.Addresses, "/"), node,
			flag(e.Conditions.Ready, "r"), flag(e.Conditions.Serving, "s"), flag(e.Conditions.Terminating, "t")))
	}
	sort.Strings(eps)
	var ports []string
	for _, p := range s.Ports {
		if p.Port != nil && p.Name != nil {
			ports = append(ports, fmt.Sprintf("%s=%d", *p.Name, *p.Port))
		}
	}
	return strings.Join(eps, " ") + " ports " + strings.Join(ports, ",")
}

// traceCounters writes to file, every 200 ms, what changed in node n's
// counters of packets dropped before or by conntrack: `conntrack -S`
// (drop, early_drop, insert_failed, invalid, clash_resolve, ...) and the
// packet counts of every DROP and REJECT rule of `iptables-save -c`
// (kube-proxy's "has no endpoints" REJECT among them), with the time.
func traceCounters(ctx context.Context, t *testing.T, n *testbed.RealNode, file string) {
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]string{}
		for ctx.Err() == nil {
			now := time.Now().UTC().Format("15:04:05.000")
			cur := map[string]string{}
			if out, err := n.Command(ctx, "conntrack", "-S").CombinedOutput(); err == nil {
				for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					cpu, rest, _ := strings.Cut(l, " ")
					// The counts of packets dropped or turned away;
					// found and search_restart count lookups.
					var kept []string
					for _, f := range strings.Fields(rest) {
						if k, _, _ := strings.Cut(f, "="); k != "found" && k != "search_restart" && k != "insert" {
							kept = append(kept, f)
						}
					}
					cur["conntrack "+cpu] = strings.Join(kept, " ")
				}
			}
			if out, err := n.Command(ctx, "iptables-save", "-c").CombinedOutput(); err == nil {
				table := ""
				for _, l := range strings.Split(string(out), "\n") {
					if strings.HasPrefix(l, "*") {
						table = l
					}
					if !strings.HasPrefix(l, "[") || !(strings.Contains(l, "-j REJECT") || strings.Contains(l, "-j DROP")) {
						continue
					}
					cnt, rule, _ := strings.Cut(l, " ")
					cur[table+" "+rule] = cnt
				}
			}
			for k, v := range cur {
				if last[k] != v {
					fmt.Fprintf(f, "%s %s: %s\n", now, k, v)
				}
			}
			last = cur
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; f.Close() })
}
