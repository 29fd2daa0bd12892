package helm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBindTimeoutStartupProbe: in node-ip mode the frontend waits
// frontend.bindTimeoutSeconds for the node IP's port (--bind-timeout) with
// /health down, and its startup probe outlasts that wait, so that kubelet
// restarts it only once the frontend itself has given up. The other modes
// neither wait nor have the probe.
func TestBindTimeoutStartupProbe(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   time.Duration
	}{
		{"mode: node-ip", 300 * time.Second},
		{"mode: node-ip\nfrontend: {bindTimeoutSeconds: 42}", 42 * time.Second},
		{"mode: iptables", 0},
		{"mode: link-local", 0},
	} {
		_, objs, _ := render(t, tc.values)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		fe, _, _ := containers(ds)
		var got time.Duration
		if i := slices.IndexFunc(fe.Args, func(a string) bool { return strings.HasPrefix(a, "--bind-timeout=") }); i >= 0 {
			if got, err = time.ParseDuration(strings.TrimPrefix(fe.Args[i], "--bind-timeout=")); err != nil {
				t.Fatalf("%q: %s: %v", tc.values, fe.Args[i], err)
			}
		}
		if got != tc.want {
			t.Errorf("%q: --bind-timeout %v, want %v", tc.values, got, tc.want)
		}
		p := fe.StartupProbe
		if tc.want == 0 {
			if p != nil {
				t.Errorf("%q: a startup probe without a bind wait", tc.values)
			}
			continue
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port != fe.LivenessProbe.HTTPGet.Port || p.HTTPGet.Host != fe.LivenessProbe.HTTPGet.Host {
			t.Fatalf("%q: frontend startup probe %+v, want /health as the liveness probe", tc.values, p)
		}
		if window := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second; window < tc.want+5*time.Second {
			t.Errorf("%q: startup probe lasts %v, not past the %v bind wait", tc.values, window, tc.want)
		}
	}
}
