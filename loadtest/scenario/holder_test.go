package scenario

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/helm"
)

// TestContainerArgvSharesTheHolderDir: the frontend and the socket holder
// get one directory for the pod's emptyDir, and the handover hostPath
// (/run/nodedns, a prefix of the holder's /run/nodedns-holder) does not
// bleed into it.
func TestContainerArgvSharesTheHolderDir(t *testing.T) {
	dir := t.TempDir()
	e := &Env{opts: Options{BinDir: "/b", OutDir: dir}, nodeKubeconfig: "/k.kubeconfig"}
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, helm.Node{Name: "n", IP: "172.31.254.10"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range cs {
		if c.Spec.Name == "backend" {
			continue
		}
		argv, err := e.containerArgv(c, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range argv {
			if v, ok := strings.CutPrefix(a, "--holder-dir="); ok {
				got[c.Spec.Name] = v
			}
		}
	}
	want := filepath.Join(dir, "emptydir", "holder")
	if got["frontend"] != want || got["holder"] != want {
		t.Errorf("--holder-dir: frontend %q, holder %q; want both %q", got["frontend"], got["holder"], want)
	}
}

func TestReplacePath(t *testing.T) {
	replace := map[string]string{"/run/nodedns": "/o/frontend/run/nodedns", "/run/nodedns-holder": "/o/emptydir/holder", "/etc/coredns": "/o/backend/etc/coredns"}
	for in, want := range map[string]string{
		"--handover-dir=/run/nodedns":      "--handover-dir=/o/frontend/run/nodedns",
		"--holder-dir=/run/nodedns-holder": "--holder-dir=/o/emptydir/holder",
		"/etc/coredns/Corefile":            "/o/backend/etc/coredns/Corefile",
		"--x=/run/nodedns/sub":             "--x=/o/frontend/run/nodedns/sub",
		"--listen=169.254.20.10:53":        "--listen=169.254.20.10:53",
		"--url=http://h/run/nodedns":       "--url=http://h/run/nodedns",
		"-conf":                            "-conf",
	} {
		if got := replacePath(in, replace); got != want {
			t.Errorf("replacePath(%q) = %q, want %q", in, got, want)
		}
	}
}
