package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/testbed"
)

const (
	externalName = "external.nodedns.test"
	externalIP   = "192.0.2.53" // TEST-NET-1: an answer, never a destination
	// clientRate is each client pod's lookups per second; two clients make
	// the 200/s.
	clientRate = 100
	// lookupTimeout: a lookup unanswered this long is lost (a stub
	// resolver's first retry comes at 5s).
	lookupTimeout = 5 * time.Second
	// floodZone: the stub upstream answers every name one label under it
	// with floodRecords A records (testbed.SetStubWideZone): about 1,070
	// bytes packed, under the 1,232 bytes of the largest answer the
	// frontend caches.
	floodZone    = "wide.nodedns.test"
	floodRecords = 64
	// floodCacheSize is the frontend's cache.size from step c on: 200,000
	// such answers need over 200 MiB, far past the chart's 64Mi memory
	// limit, so that a flood of them gets the frontend OOM-killed (step
	// d2) by configuration alone.
	floodCacheSize = 200000
)

// report prints a row of the Real nodes table per step (and, for the
// crash steps, what the pods saw second by second), and fails t for any
// failed or lost lookup. It runs deferred, so that a step that stops the
// test still reports the steps before it.
func report(t *testing.T, nodes []*testbed.RealNode, results string, steps *stepLog) {
	if len(steps.steps) == 0 {
		return
	}
	steps.end()
	time.Sleep(lookupTimeout + 2*time.Second) // the last second's lookups end and are written
	secs := readResults(t, results)
	var total stats
	for _, s := range steps.steps {
		st := summarize(secs, s.from, s.to)
		total.add(st)
		t.Logf("| %s | %d | %d | %d | %d | %s | %.2f s | `%s` |", s.name, st.lookups, st.failed, st.lost, st.slow, st.gap(), float64(st.longestWait)/1000, s.command)
		if strings.HasPrefix(s.name, "d") || strings.HasPrefix(s.name, "e") || strings.HasPrefix(s.name, "f") || st.failed+st.lost > 0 {
			t.Logf("%s, second by second:\n%s", s.name, perSecond(secs, s.from, s.to))
		}
		if st.failed+st.lost > 0 && s.expectLoss != "" {
			t.Logf("%s: %d failed and %d lost of %d lookups, expected: %s", s.name, st.failed, st.lost, st.lookups, s.expectLoss)
		} else if st.failed+st.lost > 0 {
			t.Errorf("%s: %d failed and %d lost of %d lookups; seconds with failures: %s", s.name, st.failed, st.lost, st.lookups, st.badSeconds())
		}
	}
	if t.Failed() {
		for _, n := range nodes {
			t.Logf("%s%s", n.ContainerLogs("kube-system", "nodedns-", 60000), n.ContainerLogs("default", "client-", 3000))
		}
	}
	if total.lookups < int(float64(len(nodes)*clientRate)*steps.duration().Seconds()*0.8) {
		t.Errorf("only %d lookups in %s: the clients did not keep their rate", total.lookups, steps.duration().Round(time.Second))
	}
}

// startClient runs `podtool load` as pod client-<node> on node, writing to
// dir/client-<node>/load.log (a hostPath: the node's mount namespace sees
// the host's /tmp).
func startClient(ctx context.Context, t *testing.T, tb *testbed.Testbed, node, dir string, checks []string) {
	t.Helper()
	startGroupClient(ctx, t, tb, dir, "", "client-"+node, node, checks)
}

func helmConfig(t *testing.T, tb *testbed.Testbed) *action.Configuration {
	t.Helper()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = &tb.Kubeconfig
	ns := helm.DefaultNamespace
	getter.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// podStates describes every pod of kube-system, for a failure message.
func podStates(ctx context.Context, tb *testbed.Testbed) string {
	pods, err := tb.Client().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s on %s: %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  %s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := cs.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last exit %d %s: %s", x.ExitCode, x.Reason, x.Message)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// serviceEndpoints lists the ready addresses and ports of a kube-system
// Service's EndpointSlices.
func serviceEndpoints(ctx context.Context, t *testing.T, tb *testbed.Testbed, svc string) string {
	t.Helper()
	list, err := tb.Client().DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, es := range list.Items {
		var ports []string
		for _, p := range es.Ports {
			if p.Port != nil {
				ports = append(ports, fmt.Sprint(*p.Port))
			}
		}
		for _, e := range es.Endpoints {
			ready := e.Conditions.Ready != nil && *e.Conditions.Ready
			out = append(out, fmt.Sprintf("%s:%s(ready=%v)", strings.Join(e.Addresses, ","), strings.Join(ports, "/"), ready))
		}
	}
	return strings.Join(out, " ")
}

func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
