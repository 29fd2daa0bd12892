package helm

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/nodedns/nodedns/images"
)

// imageBins caches the binaries built as the images build them, for the
// tests that run them; TestMain removes dir.
var imageBins struct {
	sync.Mutex
	dir   string
	built map[string]string
}

// imageBinary builds binary ("nodedns-frontend", "nodedns-backend") the way
// the images package builds the one it puts into the image (CGO_ENABLED=0,
// -trimpath, stripped), for this machine's architecture. Built once per test
// binary.
func imageBinary(t *testing.T, binary string) string {
	t.Helper()
	imageBins.Lock()
	defer imageBins.Unlock()
	if bin, ok := imageBins.built[binary]; ok {
		return bin
	}
	if imageBins.dir == "" {
		dir, err := os.MkdirTemp("", "nodedns-helm-bins-")
		if err != nil {
			t.Fatal(err)
		}
		imageBins.dir, imageBins.built = dir, map[string]string{}
	}
	pkg := map[string]string{images.FrontendName: "./frontend", images.BackendName: "./backend"}[binary]
	if pkg == "" {
		t.Fatalf("no image binary %q", binary)
	}
	root, err := images.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(imageBins.dir, binary)
	if _, err := images.GoBuildInArch(context.Background(), root, pkg, bin, "-s -w", runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	imageBins.built[binary] = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if imageBins.dir != "" {
		os.RemoveAll(imageBins.dir)
	}
	os.Exit(code)
}
