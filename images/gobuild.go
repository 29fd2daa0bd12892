package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// modulePath is the main module's path, to recognise the repository root.
const modulePath = "github.com/nodedns/nodedns"

// Tree is the source tree images are built from.
type Tree struct {
	// Root is the repository root (holding the main go.mod).
	Root string
	// Version is stamped into the binaries (-X main.version) and the
	// org.opencontainers.image.version label: `git describe --tags --always
	// --dirty`, as the Makefile computes it.
	Version string
	// Revision is the commit (org.opencontainers.image.revision).
	Revision string
	// Epoch is SOURCE_DATE_EPOCH: the commit time, or the environment
	// variable when set. Every timestamp in an image is this one.
	Epoch time.Time
	// Source is the org.opencontainers.image.source label.
	Source string
	// bins keeps each binary built for this tree, so that building an
	// image twice (a reproducibility check, a release after `make
	// images`) compiles once. ReadTree sets it; a Tree literal builds
	// every time.
	bins *binCache
}

// binCache holds built binaries by package and architecture.
type binCache struct {
	mu    sync.Mutex
	built map[string][]byte
}

// DefaultSource is the repository the images' source label names.
const DefaultSource = "https://github.com/nodedns/nodedns"

// FindRoot returns the nearest directory at or above dir whose go.mod
// declares the nodedns module.
func FindRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && (bytes.HasPrefix(b, []byte("module "+modulePath+"\n")) || bytes.Contains(b, []byte("\nmodule "+modulePath+"\n"))) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of %s at or above %s", modulePath, dir)
		}
		d = parent
	}
}

// ReadTree fills a Tree from git at root; version, when not empty,
// overrides git describe (the Makefile passes its VERSION).
func ReadTree(ctx context.Context, root, version string) (Tree, error) {
	t := Tree{Root: root, Version: version, Source: DefaultSource, bins: &binCache{built: map[string][]byte{}}}
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	var err error
	if t.Version == "" {
		if t.Version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
			return t, err
		}
	}
	if t.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return t, err
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return t, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		t.Epoch = time.Unix(n, 0).UTC()
		return t, nil
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return t, err
	}
	n, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return t, fmt.Errorf("commit time %q: %w", ct, err)
	}
	t.Epoch = time.Unix(n, 0).UTC()
	return t, nil
}

// GoBuild builds the main package pkg (relative to the root, "./frontend")
// for linux/amd64 (GoBuildFor).
func (t Tree) GoBuild(ctx context.Context, pkg string) ([]byte, error) {
	return t.GoBuildFor(ctx, pkg, "amd64")
}

// GoBuildFor builds the main package pkg for linux/arch the way `make
// build` does — CGO_ENABLED=0, -trimpath, -ldflags "-s -w -X
// main.version=<version>" — and returns the binary.
func (t Tree) GoBuildFor(ctx context.Context, pkg, arch string) ([]byte, error) {
	key := pkg + " " + arch + " " + t.Version
	if t.bins != nil {
		t.bins.mu.Lock()
		defer t.bins.mu.Unlock()
		if b, ok := t.bins.built[key]; ok {
			return b, nil
		}
	}
	dir, err := os.MkdirTemp("", "nodedns-images-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", pkg, err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, filepath.Base(pkg))
	b, err := GoBuildInArch(ctx, t.Root, pkg, out, "-s -w -X main.version="+t.Version, arch)
	if err != nil {
		return nil, err
	}
	if t.bins != nil {
		t.bins.built[key] = b
	}
	return b, nil
}

// GoBuildIn runs `go build -trimpath -ldflags ldflags -o out pkg` in dir
// for linux/amd64 without cgo, and returns the binary's bytes.
func GoBuildIn(ctx context.Context, dir, pkg, out, ldflags string) ([]byte, error) {
	return GoBuildInArch(ctx, dir, pkg, out, ldflags, "amd64")
}

// GoBuildInArch is GoBuildIn for linux/arch.
func GoBuildInArch(ctx context.Context, dir, pkg, out, ldflags, arch string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s for linux/%s: %w\n%s", pkg, arch, err, tailString(b, 3000))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("go build %s: %w", pkg, err)
	}
	if len(b) == 0 {
		return nil, errors.New("go build " + pkg + ": empty binary")
	}
	return b, nil
}

// tailString returns at most the last n bytes of b.
func tailString(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
