package helm

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestFrontendNetRaw: the frontend has NET_RAW only where iptables-legacy
// may be used (iptablesBackend auto or legacy): iptables-nft talks to the
// kernel over netlink and needs none (TestKernelNoNetRaw,
// frontend/nodenet). The flag follows the value.
func TestFrontendNetRaw(t *testing.T) {
	for _, tc := range []struct {
		values string
		raw    bool
		flag   string
	}{
		{``, true, "--iptables-backend=auto"},
		{`frontend: {iptablesBackend: legacy}`, true, "--iptables-backend=legacy"},
		{`frontend: {iptablesBackend: nft}`, false, "--iptables-backend=nft"},
		{`{mode: node-ip, frontend: {iptablesBackend: nft}}`, false, "--iptables-backend=nft"},
		{`frontend: {iptablesBackend: nft, capabilities: [NET_ADMIN, NET_BIND_SERVICE, NET_RAW]}`, true, "--iptables-backend=nft"},
	} {
		_, objs, _ := render(t, tc.values)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		fe, _, _ := containers(ds)
		caps := fe.SecurityContext.Capabilities
		raw := slices.Contains(caps.Add, corev1.Capability("NET_RAW"))
		if raw != tc.raw || !slices.Contains(caps.Add, "NET_ADMIN") || !slices.Contains(caps.Add, "NET_BIND_SERVICE") || !slices.Contains(caps.Drop, "ALL") {
			t.Errorf("%q: frontend capabilities %+v, NET_RAW %v; want NET_RAW %v beside NET_ADMIN and NET_BIND_SERVICE, ALL dropped", tc.values, caps, raw, tc.raw)
		}
		n := 0
		for _, c := range caps.Add {
			if c == "NET_RAW" {
				n++
			}
		}
		if n > 1 {
			t.Errorf("%q: NET_RAW added %d times", tc.values, n)
		}
		args := strings.Join(append(fe.Command, fe.Args...), " ")
		if !strings.Contains(args, tc.flag) {
			t.Errorf("%q: frontend command lacks %s: %s", tc.values, tc.flag, args)
		}
	}
}
