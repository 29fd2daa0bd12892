package helm

import (
	"testing"
)

// TestTokenOnlyInBackend: the ServiceAccount token is mounted in the
// backend alone, which talks to the API server; the frontend and the
// holder (root, host network) get none, as issue 41 asks, and the backend
// gets it where client-go's in-cluster configuration reads it.
func TestTokenOnlyInBackend(t *testing.T) {
	for _, mode := range []string{"iptables", "link-local", "node-ip"} {
		r, err := Render(map[string]any{"mode": mode}, onEmptyCluster())
		if err != nil {
			t.Fatal(err)
		}
		objs, err := r.Objects()
		if err != nil {
			t.Fatal(err)
		}
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		spec := ds.Spec.Template.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken is not false: every container would get the token", mode)
		}
		const path = "/var/run/secrets/kubernetes.io/serviceaccount"
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == path && m.Name == "kube-api-access" {
					mounted = true
				}
			}
			if want := c.Name == "backend"; mounted != want {
				t.Errorf("%s: container %s: token mounted %v, want %v", mode, c.Name, mounted, want)
			}
		}
	}
}
