package helm

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubeProxyCleanup is how long after a kube-dns endpoint stopped serving
// kube-proxy had deleted the UDP conntrack entries still mapped to it: 0.5
// to 3 s in the traced lifecycle rows (docs/real-nodes.md, "Lifecycle
// matrix").
const kubeProxyCleanup = 3 * time.Second

// TestUnreadyBeforeBackendExits: in link-local mode the pod's endpoint in
// kube-dns is its backend's fallback listener, and kube-proxy deletes the
// UDP conntrack entries mapped to it only once it stops serving, i.e. once
// the pod is not ready. The frontend reports unready at SIGTERM; its
// readiness probe must notice within 2 s, and the backend must keep
// answering (the frontend's lameduck, then the backend's own, with the
// backend as a native sidecar; the backend's alone as a plain container,
// which gets SIGTERM with the frontend) for kube-proxy's cleanup after
// that, all within the grace period.
func TestUnreadyBeforeBackendExits(t *testing.T) {
	lameduckRE := regexp.MustCompile(`lameduck (\S+)`)
	for _, values := range []string{
		"mode: link-local",
		"mode: link-local\nbackend: {nativeSidecar: false}",
		"mode: iptables",
		"mode: node-ip",
	} {
		_, objs, _ := render(t, values)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		fe, _, sidecar := containers(ds)
		p := fe.ReadinessProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
			t.Fatalf("%q: frontend readiness probe %+v", values, p)
		}
		unready := time.Duration(p.PeriodSeconds*max(p.FailureThreshold, 1)) * time.Second
		if unready > 2*time.Second {
			t.Errorf("%q: frontend readiness probe notices SIGTERM after up to %v (every %d s, %d failures), want 2 s at most",
				values, unready, p.PeriodSeconds, p.FailureThreshold)
		}
		var feLameduck time.Duration
		if i := slices.IndexFunc(fe.Args, func(a string) bool { return strings.HasPrefix(a, "--lameduck=") }); i >= 0 {
			if feLameduck, err = time.ParseDuration(strings.TrimPrefix(fe.Args[i], "--lameduck=")); err != nil {
				t.Fatalf("%q: %s: %v", values, fe.Args[i], err)
			}
		}
		m := lameduckRE.FindStringSubmatch(ConfigMaps(objs)["nodedns-backend"].Data["Corefile"])
		if m == nil {
			t.Fatalf("%q: no lameduck in the backend's Corefile", values)
		}
		beLameduck, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("%q: backend lameduck %q: %v", values, m[1], err)
		}
		answering := beLameduck
		if sidecar {
			answering += feLameduck
		}
		if answering < unready+kubeProxyCleanup {
			t.Errorf("%q: the backend answers %v after SIGTERM, less than the readiness probe's %v and kube-proxy's %v",
				values, answering, unready, kubeProxyCleanup)
		}
		if grace := time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace < answering+5*time.Second {
			t.Errorf("%q: grace period %v, not past the %v the pod answers after SIGTERM plus the frontend's drain", values, grace, answering)
		}
	}
}
