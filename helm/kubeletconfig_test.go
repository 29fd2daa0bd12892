package helm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodedns/nodedns/frontend/diagnose"
)

// TestKubeletConfigMount: frontend.kubeletConfig mounts that host file
// read-only where `nodedns-frontend diagnose --pid=1` looks for kubelet's
// configuration by default; unset, nothing of the host's kubelet is
// mounted (diagnose then reports the check as SKIP, and NOTES.txt says
// so); a relative path fails the rendering.
func TestKubeletConfigMount(t *testing.T) {
	for _, tc := range []struct {
		values, host string
	}{
		{``, ""},
		{`frontend: {kubeletConfig: /var/lib/kubelet/config.yaml}`, "/var/lib/kubelet/config.yaml"},
		{`frontend: {kubeletConfig: /etc/kubernetes/kubelet/kubelet-config.json}`, "/etc/kubernetes/kubelet/kubelet-config.json"},
	} {
		r, objs, _ := render(t, tc.values)
		// NOTES.txt says the check is skipped exactly when nothing is mounted.
		if hint := strings.Contains(r.Notes, "kubelet clusterDNS check reports SKIP"); hint != (tc.host == "") {
			t.Errorf("%q: NOTES.txt's SKIP hint %v, want %v:\n%s", tc.values, hint, tc.host == "", r.Notes)
		}
		// The node checked is one that runs a nodedns pod.
		if !strings.Contains(r.Notes, "NODE=$(kubectl -n kube-system get pod $POD -o jsonpath='{.spec.nodeName}')") {
			t.Errorf("%q: NOTES.txt does not take the node from a nodedns pod:\n%s", tc.values, r.Notes)
		}
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		fe, _, _ := containers(ds)
		var mount *corev1.VolumeMount
		for i := range fe.VolumeMounts {
			if fe.VolumeMounts[i].Name == "kubelet-config" {
				mount = &fe.VolumeMounts[i]
			}
		}
		var vol *corev1.Volume
		for i := range ds.Spec.Template.Spec.Volumes {
			if v := &ds.Spec.Template.Spec.Volumes[i]; v.Name == "kubelet-config" {
				vol = v
			}
		}
		if tc.host == "" {
			if mount != nil || vol != nil {
				t.Errorf("%q: kubelet-config mounted by default: %+v %+v", tc.values, mount, vol)
			}
			continue
		}
		if mount == nil || !mount.ReadOnly || mount.MountPath != diagnose.DefaultKubeletConfig {
			t.Errorf("%q: mount %+v, want read-only at %s (diagnose's default)", tc.values, mount, diagnose.DefaultKubeletConfig)
		}
		if vol == nil || vol.HostPath == nil || vol.HostPath.Path != tc.host || vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathFile {
			t.Errorf("%q: volume %+v, want hostPath %s of type File", tc.values, vol, tc.host)
		}
	}
	vals, err := ParseValues(`frontend: {kubeletConfig: var/lib/kubelet/config.yaml}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(vals, onEmptyCluster()); err == nil || !strings.Contains(err.Error(), "kubeletConfig") {
		t.Errorf("a relative kubeletConfig rendered (err %v)", err)
	}
}
