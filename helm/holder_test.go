package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestHolder checks the socket holder's container: the frontend's image
// running `hold`, no capability, not root, and one emptyDir of the pod
// mounted where the frontend's --holder-dir and the holder's point;
// holder.enabled=false removes all of it.
func TestHolder(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   bool
		dir    string
	}{
		{``, true, "/run/nodedns-holder"},
		{"holder: {dir: /run/h, timeout: 10s}", true, "/run/h"},
		{"holder: {enabled: false}", false, ""},
	} {
		_, objs, _ := render(t, tc.values)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		pod := ds.Spec.Template.Spec
		fe, _, _ := containers(ds)
		var h *corev1.Container
		for i := range pod.Containers {
			if pod.Containers[i].Name == "holder" {
				h = &pod.Containers[i]
			}
		}
		hasFlag := slices.Contains(fe.Args, "--holder-dir="+tc.dir)
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "holder" {
				vol = &pod.Volumes[i]
			}
		}
		if !tc.want {
			if h != nil || vol != nil || slices.ContainsFunc(fe.Args, func(a string) bool { return len(a) > 13 && a[:13] == "--holder-dir=" }) {
				t.Errorf("%q: holder container %v, volume %v, frontend args %q: want none", tc.values, h != nil, vol != nil, fe.Args)
			}
			continue
		}
		if h == nil || vol == nil || vol.EmptyDir == nil || !hasFlag {
			t.Fatalf("%q: holder container %v, emptyDir %v, frontend --holder-dir=%s %v", tc.values, h != nil, vol != nil && vol.EmptyDir != nil, tc.dir, hasFlag)
		}
		if h.Image != fe.Image || !slices.Equal(h.Command, []string{"nodedns-frontend", "hold"}) || !slices.Contains(h.Args, "--holder-dir="+tc.dir) {
			t.Errorf("%q: holder runs %s %q %q, want the frontend's image %s with hold --holder-dir=%s", tc.values, h.Image, h.Command, h.Args, fe.Image, tc.dir)
		}
		for _, c := range []*corev1.Container{fe, h} {
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "holder" && m.MountPath == tc.dir }) {
				t.Errorf("%q: %s does not mount the holder volume at %s", tc.values, c.Name, tc.dir)
			}
		}
		sc := h.SecurityContext
		if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Contains(sc.Capabilities.Drop, "ALL") ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%q: holder security context %+v: want non-root, no capability, no escalation, read-only root", tc.values, sc)
		}
		// The frontend (root, no CAP_DAC_OVERRIDE) connects to the 0660
		// socket through the group.
		if sc.RunAsGroup == nil || *sc.RunAsGroup != 0 {
			t.Errorf("%q: holder group %v, want 0 (the frontend's)", tc.values, sc.RunAsGroup)
		}
		if h.Resources.Requests.Memory().IsZero() || h.Resources.Limits.Memory().IsZero() {
			t.Errorf("%q: holder without memory request and limit", tc.values)
		}
	}
}

// TestHolderAcceptsRenderedArgs runs the holder's rendered command line
// with the image's binary, as the chart's user when root: it must keep
// running (its flags are accepted, it can create its socket in a
// directory that, like an emptyDir, is world-writable) and stop cleanly on
// SIGTERM.
func TestHolderAcceptsRenderedArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not building nodedns-frontend")
	}
	bin := imageBinary(t, "nodedns-frontend")
	cs, err := NodeContainers(map[string]any{}, onEmptyCluster(), Node{Name: "node-a", IP: "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cs, func(c Container) bool { return c.Spec.Name == "holder" })
	if i < 0 {
		t.Fatal("no holder container rendered")
	}
	h := cs[i]
	// Directories of their own: the parents of t.TempDir's are private.
	pubDir := func(mode os.FileMode) string {
		d, err := os.MkdirTemp("", "nodedns-holder-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dir := pubDir(0o777)
	args := slices.Clone(h.Command[1:])
	for j, a := range args {
		if strings.HasPrefix(a, "--holder-dir=") {
			args[j] = "--holder-dir=" + dir
		}
	}
	sc := h.Spec.SecurityContext
	if os.Geteuid() == 0 {
		// The build directory is private: copy the binary where the
		// chart's user may run it, as it may in the image.
		pub := pubDir(0o755)
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(pub, "nodedns-frontend")
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, args...)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(*sc.RunAsGroup)}}
	} else {
		t.Logf("not root: running the holder as uid %d instead of the chart's %d", os.Geteuid(), *sc.RunAsUser)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("%s exited: %v\n%s", strings.Join(h.Command, " "), err, stderr.String())
	case <-time.After(time.Second):
	}
	fi, err := os.Stat(filepath.Join(dir, "holder.sock"))
	if err != nil {
		t.Errorf("holder socket: %v\n%s", err, stderr.String())
	} else if fi.Mode().Perm() != 0o660 {
		t.Errorf("holder socket mode %v, want 0660", fi.Mode().Perm())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit within 5s of SIGTERM")
	}
}

// TestHolderRelay: with the fallback Service, the holder relays through
// it (--relay is the frontend's --fallback, whatever the mode and address
// family), answering the frontend's --allow-networks; without it, the
// holder only holds.
func TestHolderRelay(t *testing.T) {
	for _, tc := range []struct {
		values string
		relay  string // "" for none
	}{
		{``, "10.96.0.11:53"},
		{`holder: {relayAfter: 3s}`, "10.96.0.11:53"},
		{`frontend: {allowedNetworks: [local, 10.244.0.0/16, "2001:db8:244::/56"]}`, "10.96.0.11:53"},
		{`mode: node-ip`, "10.96.0.11:5301"},
		{"localIP: fd00::10\nservice: {clusterIP: fd00:10:96::a}\nfallback: {clusterIP: fd00:10:96::b}", "[fd00:10:96::b]:53"},
		{`fallback: {enabled: false}`, ""},
	} {
		r, objs, _ := render(t, tc.values)
		ds, err := DaemonSet(objs)
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "holder" {
				args = c.Args
			}
		}
		hasFlag := func(prefix string) bool {
			return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
		}
		if tc.relay == "" {
			if hasFlag("--relay") {
				t.Errorf("%q: holder args %q: want no --relay without the fallback Service", tc.values, args)
			}
			continue
		}
		if fb := frontendSetting(t, r, "fallback"); fb != tc.relay {
			t.Errorf("%q: frontend fallback %q, want %q", tc.values, fb, tc.relay)
		}
		if !slices.Contains(args, "--relay="+tc.relay) || !hasFlag("--relay-after=") {
			t.Errorf("%q: holder args %q: want --relay=%s and --relay-after", tc.values, args, tc.relay)
		}
		// The relay answers whom the frontend answers.
		if allow := frontendSetting(t, r, "allow-networks"); !slices.Contains(args, "--allow-networks="+allow) {
			t.Errorf("%q: holder args %q: want --allow-networks=%s, the frontend's", tc.values, args, allow)
		}
		if tc.values == `holder: {relayAfter: 3s}` && !slices.Contains(args, "--relay-after=3s") {
			t.Errorf("%q: holder args %q: want --relay-after=3s", tc.values, args)
		}
	}
}
