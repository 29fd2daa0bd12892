package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// KubernetesVersion is the release of kube-apiserver and kube-proxy that the
// tools/k8s module builds. It names the cache directory, so a version bump
// rebuilds instead of running stale binaries.
const KubernetesVersion = "v1.36.3"

// KubernetesBinaries are the commands tools/k8s builds: the control plane
// and kube-proxy for every testbed, the rest for real nodes (realnode.go).
var KubernetesBinaries = []string{"kube-apiserver", "kube-proxy", "kubelet", "kube-controller-manager", "kube-scheduler", "kubectl"}

// toolsModule is the module path of tools/k8s, used to recognise its go.mod.
const toolsModule = "github.com/nodedns/nodedns/tools/k8s"

// binMu serialises builds started from one process; build.sh holds a file
// lock against builds from other processes (test packages run in parallel).
var binMu sync.Mutex

// BinDir returns the directory holding the cached Kubernetes binaries:
// $NODEDNS_K8S_BIN_DIR if set, else <user cache dir>/nodedns/k8s-<version>.
func BinDir() (string, error) {
	if d := os.Getenv("NODEDNS_K8S_BIN_DIR"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate the cache directory for Kubernetes binaries: %w", err)
	}
	return filepath.Join(c, "nodedns", "k8s-"+KubernetesVersion), nil
}

// Binary returns the path of a cached Kubernetes binary (one of
// KubernetesBinaries), building it from the tools/k8s module first when it
// is missing. The first build of kube-apiserver takes 10-20 minutes on two
// cores; `make tools` does it ahead of the tests.
func Binary(name string) (string, error) {
	if !slices.Contains(KubernetesBinaries, name) {
		return "", fmt.Errorf("binary %q: the testbed builds only %s", name, strings.Join(KubernetesBinaries, ", "))
	}
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if isExecutable(path) {
		return path, nil
	}

	binMu.Lock()
	defer binMu.Unlock()
	if isExecutable(path) {
		return path, nil
	}
	tools, err := toolsDir()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	log.Printf("testbed: %s missing; building %s %s from %s (the first build takes 10-20 minutes)", path, name, KubernetesVersion, tools)
	var out bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(tools, "build.sh"), name)
	cmd.Env = append(os.Environ(), "NODEDNS_K8S_BIN_DIR="+dir)
	cmd.Stdout = io.MultiWriter(&out, log.Writer())
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s with %s/build.sh: %w\n%s", name, tools, err, tail(out.Bytes(), 4096))
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("build %s: %s still missing after build.sh", name, path)
	}
	return path, nil
}

// toolsDir finds tools/k8s: $NODEDNS_TOOLS_DIR, else the nearest tools/k8s
// above the working directory (tests run in their package directory, `go run`
// in the repository root), else next to this source file.
func toolsDir() (string, error) {
	if d := os.Getenv("NODEDNS_TOOLS_DIR"); d != "" {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			cand := filepath.Join(d, "tools", "k8s")
			if b, err := os.ReadFile(filepath.Join(cand, "go.mod")); err == nil && bytes.Contains(b, []byte("module "+toolsModule+"\n")) {
				return cand, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", errors.New("tools/k8s not found above the working directory; set NODEDNS_TOOLS_DIR or run `make tools`")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// tail returns at most the last n bytes of b, starting at a line boundary.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}
