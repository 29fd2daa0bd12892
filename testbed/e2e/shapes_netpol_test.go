package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/testbed"
)

// The netpol shape: kubeadm's DNS, a real NetworkPolicy engine on every
// node (kube-network-policies, SIG Network's reference implementation,
// built from its Go module), and the clients' namespace under default-deny
// egress with the DNS rule docs/networkpolicy.md gives. A second
// namespace holds only the rule most guides give (egress to
// k8s-app=kube-dns pods in kube-system on 53); a probe pod there resolves
// before the install (CoreDNS's pods behind the ClusterIP) and after it
// (nodedns holding the ClusterIP), and the shape checks what the engine
// did to it.

// knpModule is the engine's Go module and version; its main package is
// cmd (the NetworkPolicy agent, admin policies off unless flagged).
const (
	knpModule  = "sigs.k8s.io/kube-network-policies"
	knpVersion = "v0.8.0"
	knpImage   = "nodedns.test/kube-network-policies:" + knpVersion
	// knpNamespace is the agent's namespace: not kube-system, which the
	// matrix empties between shapes.
	knpNamespace = "kube-network-policies"
	// knpMetrics is the agent's metrics port (hostNetwork, node IP).
	knpMetrics = 9080
	// docNamespace holds the probe under the commonly documented rule.
	docNamespace = "netpol-documented"
	// knpVerbosityEnv sets the agent's --v: 1 (the default) logs no
	// packet; 2 logs every packet it judges, source, destination and
	// verdict, for the probes' evidence, but costs the agent about a
	// millisecond a packet: its user space then falls behind its queue and
	// the kernel drops packets before judgement (measured: 920 a node in
	// one run, lookups lost with them).
	knpVerbosityEnv = "NODEDNS_NETPOL_V"
)

// buildNetpolImage builds the agent from its module (`go install
// module/cmd@version`, outside this module) into an image of one static
// binary.
func buildNetpolImage(ctx context.Context, t *testing.T) testbed.Archive {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags=-s -w", knpModule+"/cmd@"+knpVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+dir, "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd@%s: %v\n%s", knpModule, knpVersion, err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.FilesLayer([]images.File{{Path: "bin/netpol", Data: data, Mode: 0o755}}, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Build(images.Spec{Layers: []v1.Layer{layer}, Entrypoint: []string{"/bin/netpol"}, Created: time.Unix(1_700_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "netpol.oci.tar")
	if err := images.WriteArchive(p, img, knpImage, knpVersion); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-network-policies %s built from its Go module in %s", knpVersion, time.Since(start).Round(time.Second))
	return testbed.Archive{Ref: knpImage, Path: p, Digest: d.String()}
}

// netpolAgentManifest is the project's install.yaml, in its own
// namespace, NRI off (the nodes' containerd runs no NRI), with
// NET_ADMIN instead of privileged.
const netpolAgentManifest = `apiVersion: v1
kind: Namespace
metadata: {name: kube-network-policies}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-network-policies, namespace: kube-network-policies}
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: kube-network-policies}
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-network-policies}
subjects:
- {kind: ServiceAccount, name: kube-network-policies, namespace: kube-network-policies}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-network-policies
  namespace: kube-network-policies
spec:
  selector:
    matchLabels: {app: kube-network-policies}
  template:
    metadata:
      labels: {app: kube-network-policies}
    spec:
      hostNetwork: true
      serviceAccountName: kube-network-policies
      tolerations: [{operator: Exists, effect: NoSchedule}]
      containers:
      - name: kube-network-policies
        image: IMAGE
        imagePullPolicy: Never
        args: [--hostname-override=$(MY_NODE_NAME), --v=VERBOSITY, --nfqueue-id=98, --disable-nri, --metrics-bind-address=:METRICS]
        securityContext:
          capabilities: {add: [NET_ADMIN]}
        env:
        - name: MY_NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
`

// netpolPolicies: default-deny egress in both namespaces; the commonly
// documented DNS rule in both; in the clients' namespace, the rule
// docs/networkpolicy.md adds for nodedns (iptables mode): the kube-dns
// ClusterIP and the link-local address, which nodedns holds on the node
// untracked, so the engine sees them un-NATed, and the node subnet, where
// the hostNetwork nodedns pods serve behind kube-dns (port 53 in iptables
// mode) and which the engine does not count as pods.
const netpolPolicies = `apiVersion: v1
kind: Namespace
metadata: {name: netpol-documented}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny-egress, namespace: NS}
spec:
  podSelector: {}
  policyTypes: [Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-dns, namespace: NS}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: kube-system}
      podSelector:
        matchLabels: {k8s-app: kube-dns}
    ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
`

const netpolNodeDNSPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-nodedns, namespace: default}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to:
    - ipBlock: {cidr: CLUSTERIP/32}
    - ipBlock: {cidr: 169.254.20.10/32}
    - ipBlock: {cidr: NODESUBNET}
    ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
`

// netpolDeploy is the shape's deploy: kubeadm's CoreDNS, the engine on
// both nodes, the policies, and a probe under the documented rule alone,
// which must resolve while CoreDNS's pods serve.
func netpolDeploy(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	if err := testbed.DeployCoreDNS(ctx, r.tb.Client(), r.imgs.backend.Ref, 2); err != nil {
		t.Fatal(err)
	}
	img := buildNetpolImage(ctx, t)
	for _, n := range r.nodes {
		if err := n.ImportImage(ctx, img.Path); err != nil {
			t.Fatal(err)
		}
	}
	v := knpVerbosity()
	t.Logf("the engine logs at --v=%s (%s)", v, knpVerbosityEnv)
	m := strings.NewReplacer("IMAGE", img.Ref, "METRICS", strconv.Itoa(knpMetrics), "VERBOSITY", v).Replace(netpolAgentManifest)
	r.applyAs(ctx, t, "", m)
	// Undone in this order: the policies (the agent empties its pod sets),
	// the agent, then its table, which it leaves behind on SIGTERM (it
	// cleans up on SIGINT only) and whose queue rules would drop packets
	// with no agent reading the queue.
	t.Cleanup(func() {
		bg := context.Background()
		for _, args := range [][]string{
			{"-n", "default", "delete", "networkpolicy", "--all"},
			{"delete", "--ignore-not-found", "--timeout=90s", "namespace", docNamespace, knpNamespace},
			{"delete", "--ignore-not-found", "clusterrole,clusterrolebinding", "kube-network-policies"},
		} {
			if out, err := kubectlOutput(bg, r.tb, args...); err != nil {
				t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		for _, n := range r.nodes {
			_, _ = n.Run(bg, "nft", "delete", "table", "inet", "kube-network-policies")
			for _, c := range []string{"INPUT", "FORWARD", "POSTROUTING"} {
				_, _ = n.Run(bg, "iptables", "-t", "mangle", "-D", c, "-j", "KNP-"+c)
				_, _ = n.Run(bg, "iptables", "-t", "mangle", "-F", "KNP-"+c)
				_, _ = n.Run(bg, "iptables", "-t", "mangle", "-X", "KNP-"+c)
			}
		}
	})
	if err := testbed.WaitDaemonSetReady(ctx, r.tb.Client(), knpNamespace, "kube-network-policies", int32(len(r.nodes))); err != nil {
		t.Fatalf("the engine's DaemonSet: %v\n%s", err, podStates(ctx, r.tb))
	}
	r.knpDrops = sampleQueueDrops(ctx, t, r.nodes)
	var pol []string
	for _, ns := range []string{"default", docNamespace} {
		pol = append(pol, strings.ReplaceAll(netpolPolicies, "NS", ns))
	}
	pol = append(pol, strings.NewReplacer("CLUSTERIP", r.dnsIP, "NODESUBNET", testbed.NodeSubnet).Replace(netpolNodeDNSPolicy))
	r.applyAs(ctx, t, "", strings.Join(pol, "\n---\n"))
	// The engine's table on every node, its queue rules in place; where
	// the kernel has no nftables queue expression, the same rules as
	// iptables NFQUEUE rules (knpQueueRules).
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range r.nodes {
		if err := waitUntil(wctx, func() bool {
			out, err := n.Run(wctx, "nft", "list", "table", "inet", "kube-network-policies")
			return err == nil && strings.Contains(string(out), "queue")
		}); err == nil {
			continue
		}
		if why := nftQueueUnsupported(ctx, n); why == "" {
			logs, _ := kubectlOutput(ctx, r.tb, "-n", knpNamespace, "logs", "-l", "app=kube-network-policies", "--tail=30")
			t.Fatalf("%s: no kube-network-policies nftables table, though the kernel has nft's queue; the engine's log:\n%s", n.Name, logs)
		} else {
			t.Logf("%s: the engine cannot write its nftables table (%s); its queue rules as iptables NFQUEUE rules instead", n.Name, why)
		}
		for _, rule := range knpQueueRules() {
			if out, err := n.Run(ctx, "iptables", rule...); err != nil {
				t.Fatalf("%s: iptables %s: %v\n%s", n.Name, strings.Join(rule, " "), err, out)
			}
		}
	}
	out, _ := r.nodes[0].Run(ctx, "iptables", "-t", "mangle", "-S")
	t.Logf("%s: iptables -t mangle -S:\n%s", r.nodes[0].Name, out)
	if ok, why := r.netpolProbe(ctx, t, "probe-a", docNamespace, ""); !ok {
		t.Fatalf("a: under the documented rule, with CoreDNS's pods behind %s, the probe did not resolve: %s", r.dnsIP, why)
	}
}

// netpolAfterInstall checks, with nodedns serving, what the engine does to
// a lookup under the documented rule alone, and logs the engine's
// evidence: its ruleset, its verdicts, its log.
func netpolAfterInstall(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	// Each address a pod's DNS reaches with nodedns: the ClusterIP and the
	// link-local address the frontend holds untracked on the node, and the
	// other node's fallback listener, a hostNetwork pod behind kube-dns
	// (where kube-proxy's DNAT sends pods' queries when the node's own
	// frontend does not hold the ClusterIP).
	other := r.nodes[len(r.nodes)-1].IP.String()
	for i, p := range []struct {
		what, ns, nameserver string
		want                 bool
	}{
		{"the ClusterIP held on the node", docNamespace, "", false},
		{"169.254.20.10", docNamespace, "169.254.20.10", false},
		{"the fallback listener on " + r.nodes[len(r.nodes)-1].Name + " (" + other + ":53)", docNamespace, other, false},
		{"the ClusterIP held on the node", "default", "", true},
		{"169.254.20.10", "default", "169.254.20.10", true},
		{"the fallback listener on " + r.nodes[len(r.nodes)-1].Name + " (" + other + ":53)", "default", other, true},
	} {
		rule := "the documented rule alone"
		if p.ns == "default" {
			rule = "the documented rule and docs/networkpolicy.md's"
		}
		ok, why := r.netpolProbe(ctx, t, fmt.Sprintf("probe-b%d", i), p.ns, p.nameserver)
		t.Logf("b: %s, to %s: resolved=%v (%s)", rule, p.what, ok, why)
		if ok != p.want {
			t.Errorf("b: %s, to %s: resolved=%v, want %v", rule, p.what, ok, p.want)
		}
	}
	for _, n := range r.nodes {
		out, _ := n.Run(ctx, "iptables", "-t", "mangle", "-L", "-v", "-n")
		t.Logf("%s: iptables -t mangle -L -v -n:\n%s", n.Name, out)
		t.Logf("%s: the engine's verdicts: %v", n.Name, knpVerdicts(ctx, n))
	}
	r.steps.begin(knpChurnStep, "nft add table, chain with a hook; nft delete table")
	netpolChurn(ctx, t, r.nodes[0])
}

// netpolLinkLocalGroup are the link-local variant's clients naming
// 169.254.20.10, started once nodedns is installed.
const netpolLinkLocalGroup = "netpol-ll"

// netpolLinkLocalAfterInstall checks, with nodedns in link-local mode,
// what the engine does to a lookup of 169.254.20.10 under the documented
// rule alone and with docs/networkpolicy.md's, then starts a client per
// node naming 169.254.20.10, as pods do once kubelet names it.
func netpolLinkLocalAfterInstall(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	for i, p := range []struct {
		ns   string
		want bool
	}{{docNamespace, false}, {"default", true}} {
		ok, why := r.netpolProbe(ctx, t, fmt.Sprintf("probe-ll%d", i), p.ns, linkLocalIP)
		t.Logf("b: link-local mode, namespace %s, to %s: resolved=%v (%s)", p.ns, linkLocalIP, ok, why)
		if ok != p.want {
			t.Errorf("b: link-local mode, namespace %s, to %s: resolved=%v, want %v", p.ns, linkLocalIP, ok, p.want)
		}
	}
	for _, n := range r.nodes {
		startClientNaming(ctx, t, r.tb, r.results, netpolLinkLocalGroup, "client-"+netpolLinkLocalGroup+"-"+n.Name, n.Name, linkLocalIP, r.checks)
	}
	t.Cleanup(func() {
		kubectl(context.Background(), t, r.tb, "delete", "pods", "-l", "nodedns.test/client="+netpolLinkLocalGroup, "--wait=false")
	})
}

// netpolLinkLocalBeforeUninstall stops the clients naming 169.254.20.10,
// as kubelet's clusterDNS goes back to the ClusterIP before an uninstall
// (docs/modes.md): nothing answers that address once nodedns is gone.
func netpolLinkLocalBeforeUninstall(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	kubectl(ctx, t, r.tb, "delete", "pods", "-l", "nodedns.test/client="+netpolLinkLocalGroup, "--wait=true", "--timeout=60s")
}

// netpolAtEnd checks that the engine judged the clients' DNS throughout,
// and reads from its log when it synced its rules on each node.
func netpolAtEnd(ctx context.Context, t *testing.T, r *shapesRun) {
	t.Helper()
	for _, n := range r.nodes {
		v := knpVerdicts(ctx, n)
		t.Logf("%s: the engine's verdicts over the shape: %v", n.Name, v)
		if v["accept"] == 0 {
			t.Errorf("%s: the engine accepted no packet: it judged none of the clients' DNS", n.Name)
		}
	}
	r.knpSyncs = knpSyncTimes(ctx, t, r)
	if d := r.knpDrops; d != nil {
		d.mu.Lock()
		for _, n := range r.nodes {
			t.Logf("%s: sampled each second: %d packets of the queue dropped before a verdict, in %d seconds; %d UDP datagrams dropped by full sockets; %d samples",
				n.Name, within(d.queue[n.Name], time.Unix(0, 0), time.Now().Add(time.Hour)), len(d.queue[n.Name]), within(d.socket[n.Name], time.Unix(0, 0), time.Now().Add(time.Hour)), len(d.held[n.Name]))
		}
		d.mu.Unlock()
	}
}

// knpSyncTimes returns, by node, the times the engine's agent began a
// sync of its rules ("Syncing nftables rules": at its start, and on every
// event of a local pod that a policy selects, of a policy or a namespace,
// retried up to 5 times when it fails), read from each agent's log.
func knpSyncTimes(ctx context.Context, t *testing.T, r *shapesRun) map[string][]time.Time {
	t.Helper()
	pods, err := r.tb.Client().CoreV1().Pods(knpNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=kube-network-policies"})
	if err != nil {
		t.Fatal(err)
	}
	syncs := map[string][]time.Time{}
	for _, p := range pods.Items {
		logs, err := kubectlOutput(ctx, r.tb, "-n", knpNamespace, "logs", p.Name, "--timestamps", "--tail=-1")
		if err != nil {
			t.Errorf("the engine's log on %s: %v", p.Spec.NodeName, err)
			continue
		}
		times, firstErr := knpSyncs(string(logs))
		syncs[p.Spec.NodeName] = times
		bySec := map[string]int{}
		var secs []string
		for _, tm := range times {
			k := tm.UTC().Format("15:04:05")
			if bySec[k] == 0 {
				secs = append(secs, k)
			}
			bySec[k]++
		}
		for i, k := range secs {
			secs[i] = fmt.Sprintf("%s x%d", k, bySec[k])
		}
		t.Logf("%s: the engine began %d syncs of its rules (%s); the first error: %s", p.Spec.NodeName, len(times), strings.Join(secs, ", "), firstErr)
	}
	return syncs
}

// knpSyncs parses an agent's log (kubectl logs --timestamps): the times
// its syncs began, and its first sync error ("" none).
func knpSyncs(logs string) ([]time.Time, string) {
	var times []time.Time
	firstErr := ""
	for _, l := range strings.Split(logs, "\n") {
		ts, rest, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		switch {
		case strings.Contains(rest, `"Syncing nftables rules"`):
			if tm, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				times = append(times, tm)
			}
		case firstErr == "" && strings.Contains(rest, `"syncing"`):
			firstErr = strings.TrimSpace(rest)
		}
	}
	return times, firstErr
}

// queueDrops are, by node, the seconds in which the kernel dropped
// packets of the engine's queue before any verdict (the queue full, or
// the agent's socket buffer: /proc/net/netfilter/nfnetlink_queue's
// queue_dropped and user_dropped), and those in which UDP sockets of the
// node dropped datagrams (/proc/net/snmp RcvbufErrors: a frontend that
// fell behind), sampled every second.
type queueDrops struct {
	mu            sync.Mutex
	queue, socket map[string]map[int64]int
	// held is the most packets seen waiting in the queues at a sample,
	// by node and second.
	held map[string]map[int64]int
}

// sampleQueueDrops samples the nodes' drop counters every second until
// the shape ends.
func sampleQueueDrops(ctx context.Context, t *testing.T, nodes []*testbed.RealNode) *queueDrops {
	d := &queueDrops{queue: map[string]map[int64]int{}, socket: map[string]map[int64]int{}, held: map[string]map[int64]int{}}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string][2]int{}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for _, n := range nodes {
				out, err := n.Run(sctx, "cat", "/proc/net/netfilter/nfnetlink_queue", "/proc/net/snmp")
				if err != nil {
					continue
				}
				q, u, h := parseDropCounters(string(out))
				now := time.Now().Unix()
				d.mu.Lock()
				if d.held[n.Name] == nil {
					d.held[n.Name] = map[int64]int{}
				}
				d.held[n.Name][now] = max(d.held[n.Name][now], h)
				d.mu.Unlock()
				if prev, ok := last[n.Name]; ok {
					d.mu.Lock()
					if q > prev[0] {
						if d.queue[n.Name] == nil {
							d.queue[n.Name] = map[int64]int{}
						}
						d.queue[n.Name][now] += q - prev[0]
					}
					if u > prev[1] {
						if d.socket[n.Name] == nil {
							d.socket[n.Name] = map[int64]int{}
						}
						d.socket[n.Name][now] += u - prev[1]
					}
					d.mu.Unlock()
				}
				last[n.Name] = [2]int{q, u}
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// parseDropCounters sums queue_dropped and user_dropped (queue) and
// queue_total (held: packets waiting now) over the queues of
// /proc/net/netfilter/nfnetlink_queue, and reads RcvbufErrors from
// /proc/net/snmp's Udp lines, both in out.
func parseDropCounters(out string) (queue, socket, held int) {
	var udpHdr []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		_, numeric := strconv.Atoi(firstField(f))
		switch {
		case len(f) == 9 && numeric == nil:
			a, _ := strconv.Atoi(f[5])
			b, _ := strconv.Atoi(f[6])
			c, _ := strconv.Atoi(f[2])
			queue += a + b
			held += c
		case len(f) > 1 && f[0] == "Udp:" && udpHdr == nil:
			udpHdr = f
		case len(f) > 1 && f[0] == "Udp:":
			if i := slices.Index(udpHdr, "RcvbufErrors"); i > 0 && i < len(f) {
				socket, _ = strconv.Atoi(f[i])
			}
		}
	}
	return queue, socket, held
}

func firstField(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// within returns the drops of m in [from, to).
func within(m map[int64]int, from, to time.Time) int {
	n := 0
	for k, v := range m {
		if k >= from.Unix() && k < to.Unix() {
			n += v
		}
	}
	return n
}

// knpChurnStep is the netpol shape's step that registers and removes a
// netfilter hook on the first node, with no pod, policy or engine
// involved: what each of the engine's syncs does to the kernel.
const knpChurnStep = "b3. a netfilter hook added and removed 100 times on node-a (no pod event)"

// netpolChurn adds and removes an empty nftables base chain (a netfilter
// hook) on n 100 times, 100 ms apart. Removing a hook makes the kernel
// drop every packet then waiting in any nfqueue of the namespace
// (net/netfilter/core.c __nf_unregister_net_hook calls
// nf_queue_nf_hook_drop; nfnetlink_queue.c nfqnl_nf_hook_drop flushes
// every queue instance), which is what each of the engine's syncs does:
// it deletes and re-creates its table, and here, where the kernel lacks
// nft's queue expression, registers its chains' hooks and removes them
// again as the batch aborts.
func netpolChurn(ctx context.Context, t *testing.T, n *testbed.RealNode) {
	t.Helper()
	const script = `i=0; while [ $i -lt 100 ]; do
nft 'add table inet nodedns-churn; add chain inet nodedns-churn c { type filter hook input priority 10; }' || exit 1
nft delete table inet nodedns-churn || exit 1
i=$((i+1)); sleep 0.1; done`
	start := time.Now()
	if out, err := n.Run(ctx, "sh", "-c", script); err != nil {
		t.Fatalf("%s: the hook churn: %v\n%s", n.Name, err, out)
	}
	t.Logf("%s: a hook added and removed 100 times in %s", n.Name, time.Since(start).Round(100*time.Millisecond))
}

// netpolLossSlack is how far from one of the engine's syncs on its node
// a lookup may start and still be lost to it: a lookup waits up to
// lookupTimeout for its last answer, and the log's time is the sync's
// start, a moment before its batch reaches the kernel.
const netpolLossSlack = time.Second

// netpolLossPercent bounds the lost lookups the engine's queue explains,
// per step: measured on 2026-12-07 with the clients at their rate, 0.4%
// (the probes' step) to 1.6% (the install, a sync of both agents with 73
// packets waiting in one queue).
const netpolLossPercent = 2

// netpolLossOK explains the shape's lost lookups, client by client, by
// what the engine's queue did on the client's node while the lookup
// waited (from netpolLossSlack before its second to lookupTimeout after
// it): one of its syncs began (each drops the packets then waiting in
// its queue), or the kernel dropped packets of its queue before any
// verdict (its user space behind); and in knpChurnStep, on the churned
// node, the hook churn. Failed lookups, lost ones with neither near, and
// more than netpolLossPercent of a step's lookups lost are never
// explained.
func netpolLossOK(t *testing.T, r *shapesRun, steps *stepLog) groupLoss {
	return func(stepName, group string) (string, int) {
		var st *step
		for i := range steps.steps {
			if steps.steps[i].name == stepName {
				st = &steps.steps[i]
			}
		}
		if st == nil {
			return "", 0
		}
		lookups, bySync, byQueue, churned, unexplained := 0, 0, 0, 0, 0
		var near []string
		for i, n := range r.nodes {
			f := filepath.Join(r.results, group, "client-"+group+"-"+n.Name, "load.log")
			secs := readResultFiles(t, []string{f})
			s := summarize(secs, st.from, st.to)
			lookups += s.lookups
			if s.failed > 0 {
				return "", 0
			}
			for _, k := range s.bad {
				lost := secs[k].lost
				at := time.Unix(k, 0)
				if stepName == knpChurnStep && i == 0 {
					churned += lost
					continue
				}
				from, to := at.Add(-netpolLossSlack), at.Add(time.Second+lookupTimeout)
				syncs := 0
				for _, sy := range r.knpSyncs[n.Name] {
					if !sy.Before(from) && sy.Before(to) {
						syncs++
					}
				}
				var queued, socket, held int
				if r.knpDrops != nil {
					r.knpDrops.mu.Lock()
					queued = within(r.knpDrops.queue[n.Name], at, to.Add(time.Second))
					socket = within(r.knpDrops.socket[n.Name], at, to.Add(time.Second))
					for j, h := range r.knpDrops.held[n.Name] {
						if j >= k && j <= to.Unix() {
							held = max(held, h)
						}
					}
					r.knpDrops.mu.Unlock()
				}
				// The client's own sending, at most half its rate in a
				// second while the lookup waited: the client starved of
				// CPU (the machine), which reportGroups' rate rule fails.
				fewest := clientRate
				for j := k; j <= k+int64(lookupTimeout/time.Second); j++ {
					if sj := secs[j]; sj != nil && sj.sent < fewest {
						fewest = sj.sent
					}
				}
				what := fmt.Sprintf("%s %s: %d lost; %d syncs, %d queue drops, %d socket drops near, up to %d packets waiting in the queue; the client sent at least %d a second meanwhile", n.Name, at.UTC().Format("15:04:05"), lost, syncs, queued, socket, held, fewest)
				switch {
				case syncs > 0:
					bySync += lost
				case queued > 0:
					byQueue += lost
				default:
					unexplained += lost
					what += " UNEXPLAINED"
					if fewest <= clientRate/2 {
						what += " (the client starved)"
					}
				}
				near = append(near, what)
			}
		}
		if len(near) > 0 {
			t.Logf("%s, %s clients: each second with lost lookups, and what the engine's queue on the client's node did near it:\n%s", stepName, group, strings.Join(near, "\n"))
		}
		explained := bySync + byQueue
		if unexplained > 0 || explained+churned == 0 || explained > lookups*netpolLossPercent/100 {
			return "", 0
		}
		why := fmt.Sprintf("the engine's queue on the client's node: %d lost within %s after a sync of kube-network-policies began (each drops the packets waiting in its queue), %d as the kernel dropped packets of its queue before any verdict", bySync, lookupTimeout+netpolLossSlack, byQueue)
		if churned > 0 {
			why += fmt.Sprintf("; %d on %s, where the step removed a netfilter hook 100 times", churned, r.nodes[0].Name)
		}
		return why, explained + churned
	}
}

// knpVerbosity is the agent's --v (knpVerbosityEnv).
func knpVerbosity() string {
	if v := os.Getenv(knpVerbosityEnv); v != "" {
		return v
	}
	return "1"
}

// nftQueueUnsupported says why nft's queue expression cannot be used in
// n's namespace ("" when it can): kernels built without CONFIG_NFT_QUEUE
// (this machine's) refuse it, while iptables' NFQUEUE target and the
// nfnetlink queue the engine reads from work.
func nftQueueUnsupported(ctx context.Context, n *testbed.RealNode) string {
	const probe = "table inet nodedns-queue-probe { chain c { type filter hook output priority 0; meta mark 0x4e51 queue num 98 bypass; }; }"
	out, err := n.Run(ctx, "nft", probe)
	if err == nil {
		_, _ = n.Run(ctx, "nft", "delete", "table", "inet", "nodedns-queue-probe")
		return ""
	}
	return "nft's queue expression: " + strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// knpQueueRules are the engine's nftables rules (v0.8.0, no admin
// policies, its DNS race workaround on: pkg/networkpolicy/controller.go,
// syncNFTablesRules) as iptables rules, verdicts left to the engine:
//   - its prerouting chain, at dstnat+5 (after kube-proxy's DNAT): UDP to
//     port 53 from or to a pod, queued. Here in mangle INPUT and FORWARD
//     (-150, after the DNAT and the routing decision), which every packet
//     leaving prerouting goes through; nodedns's filter-table ACCEPTs come
//     later, as its iptables rules come after the engine's own table;
//   - its postrouting chain, at srcnat-5: UDP to port 53 (judged above),
//     root's sockets and established flows accepted, the rest from or to a
//     pod queued. Here in mangle POSTROUTING (-150, still after DNAT,
//     before SNAT).
//
// The engine queues its sets of the pods that policies select; here
// every pod (testbed.PodSubnet) is queued, and the engine lets pods no
// policy selects through.
func knpQueueRules() [][]string {
	q := []string{"-j", "NFQUEUE", "--queue-num", "98"}
	pods := testbed.PodSubnet
	var rules [][]string
	for _, c := range []string{"INPUT", "FORWARD", "POSTROUTING"} {
		rules = append(rules, []string{"-t", "mangle", "-N", "KNP-" + c})
		ch := []string{"-t", "mangle", "-A", "KNP-" + c}
		if c == "POSTROUTING" {
			rules = append(rules,
				append(slices.Clone(ch), "-p", "udp", "--dport", "53", "-j", "RETURN"),
				append(slices.Clone(ch), "-m", "owner", "--uid-owner", "0", "-j", "RETURN"),
				append(slices.Clone(ch), "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"),
				append(append(slices.Clone(ch), "-s", pods), q...),
				append(append(slices.Clone(ch), "-d", pods), q...))
		} else {
			rules = append(rules,
				append(append(slices.Clone(ch), "-p", "udp", "--dport", "53", "-s", pods), q...),
				append(append(slices.Clone(ch), "-p", "udp", "--dport", "53", "-d", pods), q...))
		}
		rules = append(rules, []string{"-t", "mangle", "-I", c, "1", "-j", "KNP-" + c})
	}
	return rules
}

// knpJudged summarizes the engine's log (--v=2) for the packets of pod
// ns/name: each destination, protocol and verdict, with its count, or
// "no packet judged".
func knpJudged(logs, pod string) string {
	lines := strings.Split(logs, "\n")
	// Lines carry the agent pod's name (--prefix): packet ids are each
	// agent's own sequence.
	dst := map[string]string{} // agent and packet id -> "dst proto"
	hdr := regexp.MustCompile(`^(\S+)\s+\[(\d+)\] \S+ (\S+) (\w+)$`)
	fin := regexp.MustCompile(`^(\S+) .*"Finished syncing packet" id=(\d+) .*verdict="(\w+)"`)
	count := map[string]int{}
	var order []string
	for i, l := range lines {
		if strings.Contains(l, `"Evaluating packet" srcPod="`+pod+`"`) && i+1 < len(lines) {
			if m := hdr.FindStringSubmatch(lines[i+1]); m != nil {
				dst[m[1]+m[2]] = m[3] + " " + m[4]
			}
		}
		if m := fin.FindStringSubmatch(l); m != nil {
			if d, ok := dst[m[1]+m[2]]; ok {
				k := "to " + d + " " + m[3]
				if count[k] == 0 {
					order = append(order, k)
				}
				count[k]++
			}
		}
	}
	if len(order) == 0 {
		return "no packet judged"
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%s x%d", k, count[k]))
	}
	return strings.Join(out, ", ")
}

// knpVerdicts reads the agent's kube_network_policies_packet_count by
// verdict, from its metrics on the node IP.
func knpVerdicts(ctx context.Context, n *testbed.RealNode) map[string]float64 {
	v := map[string]float64{}
	body, err := n.Run(ctx, "curl", "-sS", "--max-time", "5", fmt.Sprintf("http://%s:%d/metrics", n.IP, knpMetrics))
	if err != nil {
		v["unreachable"] = 1
		return v
	}
	re := regexp.MustCompile(`(?m)^kube_network_policies_packet_count\{[^}]*verdict="(\w+)"[^}]*\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		v[m[1]] += f
	}
	// Packets the queue itself dropped (full) or user space never took.
	q := regexp.MustCompile(`(?m)^kube_network_policies_nfqueue_(queue_dropped|user_dropped)\{[^}]*\} (\S+)$`)
	for _, m := range q.FindAllStringSubmatch(string(body), -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		v["nfqueue_"+m[1]] += f
	}
	return v
}

// netpolProbe runs, in namespace ns on the first node, a pod resolving
// web.default for 8 s through nameserver ("" kubelet's clusterDNS), and
// says whether it resolved and what it saw.
func (r *shapesRun) netpolProbe(ctx context.Context, t *testing.T, name, ns, nameserver string) (bool, string) {
	t.Helper()
	c := r.tb.Client()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodedns.test/probe": "netpol"}},
		Spec: corev1.PodSpec{
			NodeName:      r.nodes[0].Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "resolve", Image: testbed.PodToolImage, ImagePullPolicy: corev1.PullNever,
				// -delay: the engine judges a pod's packets by its IP, which
				// it learns from the API server (without NRI); before, the
				// pod is no pod to it and no policy applies.
				Args: []string{"resolve", "-delay", "3s", "-timeout", "8s", "web.default.svc.cluster.local=" + strings.TrimPrefix(r.checks[0], "web=")},
			}},
		},
	}
	if nameserver != "" {
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{nameserver}}
	}
	before := knpVerdicts(ctx, r.nodes[0])
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	var p *corev1.Pod
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitUntil(wctx, func() bool {
		var err error
		p, err = c.CoreV1().Pods(ns).Get(wctx, name, metav1.GetOptions{})
		return err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
	}); err != nil {
		t.Fatalf("probe %s/%s: %v\n%s", ns, name, err, podStates(ctx, r.tb))
	}
	msg := ""
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil {
		msg = strings.TrimSpace(p.Status.ContainerStatuses[0].State.Terminated.Message)
	}
	// What the engine on the probe's node did: its drops meanwhile and,
	// at --v=2, the probe's packets by destination and verdict.
	after := knpVerdicts(ctx, r.nodes[0])
	msg += fmt.Sprintf("; the engine on %s dropped %.0f packets meanwhile", r.nodes[0].Name, after["drop"]-before["drop"])
	if v, _ := strconv.Atoi(knpVerbosity()); v >= 2 {
		logs, err := kubectlOutput(ctx, r.tb, "-n", knpNamespace, "logs", "-l", "app=kube-network-policies", "--since=60s", "--tail=-1", "--prefix")
		if err != nil {
			t.Logf("the engine's log: %v", err)
		}
		msg += ", its log: " + knpJudged(logs, ns+"/"+name)
	}
	return p.Status.Phase == corev1.PodSucceeded, msg
}

// TestKnpJudged checks the reading of the engine's log: packet ids are per
// agent, and only the named pod's packets count.
func TestKnpJudged(t *testing.T) {
	const logs = `[pod/knp-a/c] I1207 11:31:42.683818       1 controller.go:567] "Evaluating packet" srcPod="ns/probe" dstPod="none" packet=<
[pod/knp-a/c] 	[7] 10.244.0.6:54629 10.96.0.10:53 UDP
[pod/knp-a/c] 	00000000  47 22 01 00 00 01 00 00  00 00 00 01 03 77 65 62  |G"...........web|
[pod/knp-a/c]  >
[pod/knp-b/c] I1207 11:31:42.684000       1 controller.go:493] "Finished syncing packet" id=7 duration="1ms" verdict="accept"
[pod/knp-a/c] I1207 11:31:42.686092       1 controller.go:493] "Finished syncing packet" id=7 duration="1.477728ms" verdict="drop"
[pod/knp-a/c] I1207 11:31:42.688190       1 controller.go:567] "Evaluating packet" srcPod="ns/other" dstPod="none" packet=<
[pod/knp-a/c] 	[8] 10.244.0.5:51866 10.96.0.10:53 UDP
[pod/knp-a/c] I1207 11:31:42.689000       1 controller.go:493] "Finished syncing packet" id=8 duration="1ms" verdict="accept"
[pod/knp-a/c] I1207 11:31:42.690000       1 controller.go:567] "Evaluating packet" srcPod="ns/probe" dstPod="none" packet=<
[pod/knp-a/c] 	[9] 10.244.0.6:54630 10.96.0.10:53 UDP
[pod/knp-a/c] I1207 11:31:42.691000       1 controller.go:493] "Finished syncing packet" id=9 duration="1ms" verdict="drop"
`
	if got, want := knpJudged(logs, "ns/probe"), "to 10.96.0.10:53 UDP drop x2"; got != want {
		t.Errorf("knpJudged = %q, want %q", got, want)
	}
	if got, want := knpJudged(logs, "ns/none"), "no packet judged"; got != want {
		t.Errorf("knpJudged = %q, want %q", got, want)
	}
}

// TestNetpolManifests: the engine's and the policies' manifests, their
// placeholders filled as netpolDeploy fills them, decode into the objects
// the shape needs, none keeping a placeholder.
func TestNetpolManifests(t *testing.T) {
	agent := strings.NewReplacer("IMAGE", knpImage, "METRICS", strconv.Itoa(knpMetrics), "VERBOSITY", "2").Replace(netpolAgentManifest)
	pol := strings.ReplaceAll(netpolPolicies, "NS", docNamespace) + "\n---\n" +
		strings.NewReplacer("CLUSTERIP", testbed.DNSServiceIP, "NODESUBNET", testbed.NodeSubnet).Replace(netpolNodeDNSPolicy)
	found := map[string]string{}
	dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(agent+"\n---\n"+pol), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if u.Object == nil {
			continue
		}
		s := fmt.Sprint(u.Object)
		for _, p := range []string{"IMAGE", "METRICS", "VERBOSITY", "CLUSTERIP", "NODESUBNET", "namespace:NS"} {
			if strings.Contains(s, p) {
				t.Errorf("%s/%s keeps the placeholder %s", u.GetKind(), u.GetName(), p)
			}
		}
		found[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = s
	}
	for _, want := range []string{
		"DaemonSet/" + knpNamespace + "/kube-network-policies", "ClusterRoleBinding//kube-network-policies",
		"NetworkPolicy/" + docNamespace + "/default-deny-egress", "NetworkPolicy/" + docNamespace + "/allow-dns",
		"NetworkPolicy/default/allow-nodedns",
	} {
		if _, ok := found[want]; !ok {
			t.Errorf("no %s among %d objects", want, len(found))
		}
	}
	if s := found["NetworkPolicy/default/allow-nodedns"]; !strings.Contains(s, testbed.DNSServiceIP+"/32") || !strings.Contains(s, testbed.NodeSubnet) {
		t.Errorf("allow-nodedns names neither the ClusterIP nor the node subnet: %s", s)
	}
}

// TestKnpSyncs checks the reading of the engine's log for its syncs.
func TestKnpSyncs(t *testing.T) {
	const logs = `2026-12-07T17:40:01.100000000Z I1207 17:40:01.100000       1 controller.go:711] "Syncing nftables rules"
2026-12-07T17:40:01.120000000Z E1207 17:40:01.120000       1 controller.go:694] "syncing" err="no such file or directory" key="dummy-key"
2026-12-07T17:40:01.130000000Z I1207 17:40:01.130000       1 controller.go:711] "Syncing nftables rules"
2026-12-07T17:40:02.000000000Z I1207 17:40:02.000000       1 controller.go:567] "Evaluating packet"
`
	times, firstErr := knpSyncs(logs)
	if len(times) != 2 || !times[0].Equal(time.Date(2026, 12, 7, 17, 40, 1, 100_000_000, time.UTC)) {
		t.Errorf("knpSyncs times = %v, want 2, the first at 17:40:01.1", times)
	}
	if !strings.Contains(firstErr, "no such file or directory") {
		t.Errorf("knpSyncs first error = %q", firstErr)
	}
}

// TestNetpolLossOK: a lost lookup is explained only with a sync of the
// engine on its client's node near it; a failed one never is.
func TestNetpolLossOK(t *testing.T) {
	base := time.Date(2026, 12, 7, 17, 40, 0, 0, time.UTC)
	sec := func(s int) int64 { return base.Unix() + int64(s) }
	for _, tc := range []struct {
		name  string
		lines map[string]string // node -> load.log
		syncs map[string][]time.Time
		want  int // limit; 0: not explained
	}{
		{"a sync on the node", map[string]string{"node-a": fmt.Sprintf("%d 1000 997 0 3 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			map[string][]time.Time{"node-a": {base.Add(10*time.Second + 300*time.Millisecond)}}, 3},
		{"a sync on the other node only", map[string]string{"node-a": fmt.Sprintf("%d 1000 997 0 3 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			map[string][]time.Time{"node-b": {base.Add(10 * time.Second)}}, 0},
		{"a sync too long before", map[string]string{"node-a": fmt.Sprintf("%d 1000 997 0 3 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			map[string][]time.Time{"node-a": {base.Add(5 * time.Second)}}, 0},
		{"queue drops on the node", map[string]string{"node-a": fmt.Sprintf("%d 1000 997 0 3 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			nil, 3},
		{"a failed lookup", map[string]string{"node-a": fmt.Sprintf("%d 1000 998 1 1 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			map[string][]time.Time{"node-a": {base.Add(10 * time.Second)}}, 0},
		{"more than 2%", map[string]string{"node-a": fmt.Sprintf("%d 1000 950 0 50 0 5000\n", sec(10)), "node-b": fmt.Sprintf("%d 1000 1000 0 0 0 5\n", sec(10))},
			map[string][]time.Time{"node-a": {base.Add(10 * time.Second)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r := &shapesRun{results: dir, knpSyncs: tc.syncs, knpDrops: &queueDrops{}}
			if tc.syncs == nil {
				r.knpDrops.queue = map[string]map[int64]int{"node-a": {sec(12): 5}, "node-b": {sec(30): 1}}
			}
			for _, n := range []string{"node-a", "node-b"} {
				r.nodes = append(r.nodes, &testbed.RealNode{Name: n})
				d := filepath.Join(dir, "netpol", "client-netpol-"+n)
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "load.log"), []byte(tc.lines[n]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			steps := &stepLog{steps: []step{{name: "b2", from: base, to: base.Add(time.Minute)}}}
			why, limit := netpolLossOK(t, r, steps)("b2", "netpol")
			if limit != tc.want || (tc.want > 0) != (why != "") {
				t.Errorf("netpolLossOK = %q, %d; want a reason and %d", why, limit, tc.want)
			}
		})
	}
}

// TestParseDropCounters reads the kernel's queue and UDP counters.
func TestParseDropCounters(t *testing.T) {
	const out = `   98 1234  5 2   128     3     7   5000  1
   99 1235  0 2   128     0     1   10  1
Ip: Forwarding DefaultTTL
Ip: 1 64
IcmpMsg: InType3 InType8 OutType0 OutType3 InType11 OutType8 OutType11 X
IcmpMsg: 1 2 3 4 5 6 7 8
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 2 4 100 4 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`
	if q, u, h := parseDropCounters(out); q != 11 || u != 4 || h != 5 {
		t.Errorf("parseDropCounters = %d, %d, %d; want 11, 4, 5", q, u, h)
	}
}
