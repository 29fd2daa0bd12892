package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builds holds, per package path, the binary Build made of it in this
// test process, or why it could not; guarded by buildMu.
var (
	buildMu sync.Mutex
	builds  = map[string]*build{}
)

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build compiles the main package pkg (an import path of this module) once
// per test process into a temporary directory, as the binary name (what
// ps and /proc show, which diagnose looks for), and returns its path; it
// fails the test if the build fails. Tests that run a binary as a process
// of its own use it rather than a bin/ that may be stale.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	buildMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodedns-build-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", b.bin, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// RemoveBuilds deletes the binaries Build made; a TestMain calls it after
// m.Run.
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, b := range builds {
		if b.bin != "" {
			_ = os.RemoveAll(filepath.Dir(b.bin))
		}
	}
}
