package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/testbed"
)

// slowDomainFromHostNetwork runs, on the first node of r with nodedns
// installed, a hostNetwork pod that sends 1,000 queries a second for new
// names under testbed.StubHangDomain (the stub upstream never answers
// them) for flood, beside a hostNetwork client and a pod-network client
// that each look up a new name (a miss) 20 times a second. The
// hostNetwork pods send from the node's own addresses, which the
// frontend shares among every hostNetwork pod, kubelet and node process
// (frontend/README.md). Goal: at least 99% of each client's lookups
// answered, the flood refused for its domain's share.
func slowDomainFromHostNetwork(ctx context.Context, t *testing.T, r *kubeadmRun) {
	const (
		flood = 15 * time.Second
		// Another registrable domain than the flooded one (stub.test):
		// names of one registrable domain share its share.
		okDomain   = "ok.fair.test."
		okIP       = "192.0.2.77"
		clientRate = 20
	)
	tb, node := r.tb, r.nodes[0].Name
	if err := tb.SetStubRecord("*."+okDomain, net.ParseIP(okIP)); err != nil {
		t.Fatal(err)
	}
	results, err := os.MkdirTemp("", "nodedns-e2e-fair-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(results)
	c := tb.Client()
	var created []string
	defer func() {
		for _, name := range created {
			_ = c.CoreV1().Pods("default").Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}()
	dirType := corev1.HostPathDirectory
	pod := func(name string, hostNetwork bool, args ...string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName: node, HostNetwork: hostNetwork, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "tool", Image: testbed.PodToolImage, ImagePullPolicy: corev1.PullNever, Args: args,
				}},
			},
		}
		if hostNetwork {
			// The cluster's DNS, as a hostNetwork pod that resolves
			// Services asks it (kubelet's clusterDNS).
			p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		}
		return p
	}
	client := func(name string, hostNetwork bool) {
		dir := filepath.Join(results, name, "load") // readResults reads <results>/<name>/*/load.log
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		p := pod(name, hostNetwork, "load", "-unique", "-rate", fmt.Sprint(clientRate), "-timeout", lookupTimeout.String(),
			"-out", "/results/load.log", okDomain+"="+okIP)
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "results", MountPath: "/results"}}
		p.Spec.Volumes = []corev1.Volume{{Name: "results", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}}}
		create(ctx, t, tb, p)
		created = append(created, name)
	}
	client("fair-hostnet-client", true)
	client("fair-pod-client", false)
	time.Sleep(3 * time.Second) // both resolve before the flood
	from := time.Now()
	create(ctx, t, tb, pod("fair-flood", true, "flood", "-rate", "1000", "-for", flood.String(), testbed.StubHangDomain))
	created = append(created, "fair-flood")
	var sent string
	if err := waitUntil(ctx, func() bool {
		p, err := c.CoreV1().Pods("default").Get(ctx, "fair-flood", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return false
		}
		if s := p.Status.ContainerStatuses; len(s) > 0 && s[0].State.Terminated != nil {
			sent = s[0].State.Terminated.Message
		}
		return true
	}); err != nil {
		t.Fatalf("flood pod did not finish: %v\n%s", err, podStates(ctx, tb))
	}
	to := time.Now()
	time.Sleep(lookupTimeout + 2*time.Second) // the last lookups end and are written
	var failedAll bool
	for _, name := range []string{"fair-hostnet-client", "fair-pod-client"} {
		st := summarize(readResults(t, filepath.Join(results, name)), from, to)
		answered := st.lookups - st.failed - st.lost
		t.Logf("FIGURE real node, %s beside a hostNetwork pod flooding %s at 1,000 qps (%s) for %s: %d of %d new names answered (%d failed, %d lost), slowest %d ms",
			name, strings.TrimSuffix(testbed.StubHangDomain, "."), sent, to.Sub(from).Round(time.Second), answered, st.lookups, st.failed, st.lost, st.longestWait)
		if st.lookups < int(float64(clientRate)*to.Sub(from).Seconds()*0.8) {
			t.Errorf("%s: only %d lookups in %s", name, st.lookups, to.Sub(from).Round(time.Second))
		}
		if answered*100 < st.lookups*99 {
			failedAll = true
			t.Errorf("%s: %d of %d lookups answered, want at least 99%%", name, answered, st.lookups)
		}
	}
	if failedAll {
		t.Logf("pods:\n%s", podStates(ctx, tb))
	}
	// The flood was refused for its domain's share, on the node's
	// frontend (--metrics=$(NODE_IP):9253 in the chart).
	out, err := r.nodes[0].Run(ctx, "curl", "-sf", "--max-time", "5", "http://"+r.nodes[0].IP.String()+":9253/metrics")
	if err != nil {
		t.Fatalf("frontend metrics on %s: %v\n%.500s", node, err, out)
	}
	var refused []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "nodedns_server_refused_total{") {
			refused = append(refused, l)
		}
	}
	t.Logf("FIGURE real node, %s frontend: %s", node, strings.Join(refused, "; "))
	if !strings.Contains(string(out), `nodedns_server_refused_total{reason="inflight_domain"} `) ||
		strings.Contains(string(out), `nodedns_server_refused_total{reason="inflight_domain"} 0`+"\n") {
		t.Error("no miss refused for its domain's share: the flood did not reach it, the test shows nothing")
	}
}

// create creates p in default and waits until it runs (or has run).
func create(ctx context.Context, t *testing.T, tb *testbed.Testbed, p *corev1.Pod) {
	t.Helper()
	c := tb.Client()
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool {
		got, err := c.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase != corev1.PodPending
	}); err != nil {
		t.Fatalf("pod %s: %v\n%s", p.Name, err, podStates(ctx, tb))
	}
}
