package images

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The frontend's base: Debian bookworm, minbase variant, with the iptables
// package (iptables-legacy, iptables-nft, ip6tables-*, the xtables modules
// and libnftnl/libmnl) and nothing that only a package manager or a person
// needs. It is built once by debootstrap and cached as a gzip layer.
const (
	// DebianSuite is the Debian release of the frontend's base.
	DebianSuite = "bookworm"
	// baseVersion names the cache entry; bump it when debianPackages or
	// basePrune change, so an old cached base is not reused.
	baseVersion = "1"
	// DefaultDebianMirror is where debootstrap fetches packages; the
	// NODEDNS_DEBIAN_MIRROR environment variable overrides it.
	DefaultDebianMirror = "http://deb.debian.org/debian"
)

// debianPackages are installed on top of minbase.
var debianPackages = []string{"iptables"}

// basePrune are removed from the debootstrapped tree (paths relative to it,
// globs allowed): documentation, manuals, locales, and the package
// manager's caches and logs, which hold download times and so would differ
// between two bootstraps of the same packages.
var basePrune = []string{
	"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*",
	"usr/share/lintian", "usr/share/common-licenses",
	"var/cache/apt/*", "var/cache/debconf/*-old", "var/cache/ldconfig/aux-cache",
	"var/lib/apt/lists/*", "var/log/*", "var/lib/dpkg/*-old",
	"etc/machine-id", "etc/hostname", "etc/resolv.conf", "etc/hosts",
	"dev/*", "proc/*", "sys/*", "run/*", "tmp/*",
	"debootstrap",
}

// CacheDir is where built bases are kept: $NODEDNS_IMAGES_CACHE, else
// <user cache dir>/nodedns/images.
func CacheDir() (string, error) {
	if d := os.Getenv("NODEDNS_IMAGES_CACHE"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate the image cache: %w", err)
	}
	return filepath.Join(c, "nodedns", "images"), nil
}

// BaseUnavailable says why DebianBase cannot build a base here ("" when it
// can, or when the base is already cached).
func BaseUnavailable() string {
	if p, err := basePath(); err == nil && fileExists(p) {
		return ""
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("the Debian base is not cached and building it needs root (euid %d)", os.Geteuid())
	}
	for _, tool := range []string{"debootstrap", "unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("the Debian base is not cached and %s is missing (install the debootstrap package)", tool)
		}
	}
	return ""
}

func basePath() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("debian-%s-%s-v%s.tar.gz", DebianSuite, strings.Join(debianPackages, "+"), baseVersion)
	return filepath.Join(dir, name), nil
}

// DebianBase returns the frontend's base layer, building and caching it
// first when missing (root; about 2 minutes). logf receives progress.
func DebianBase(ctx context.Context, logf func(string, ...any)) (v1.Layer, error) {
	path, err := basePath()
	if err != nil {
		return nil, err
	}
	if !fileExists(path) {
		if r := BaseUnavailable(); r != "" {
			return nil, errors.New("debian base: " + r)
		}
		if err := buildBase(ctx, path, logf); err != nil {
			return nil, err
		}
	}
	l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("debian base %s: %w", path, err)
	}
	return l, nil
}

// buildBase debootstraps into a temporary directory next to path, checks
// that iptables-legacy and iptables-nft run from it, and writes the tree as
// a gzip tar to path. debootstrap mounts /proc inside its target; it runs in
// a private mount namespace (unshare -m) so no mount reaches the host.
func buildBase(ctx context.Context, path string, logf func(string, ...any)) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	// One build at a time: parallel test packages may all find it missing.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("debian base: lock: %w", err)
	}
	if fileExists(path) {
		return nil
	}
	root, err := os.MkdirTemp(dir, ".rootfs-")
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	defer os.RemoveAll(root)

	mirror := DefaultDebianMirror
	if m := os.Getenv("NODEDNS_DEBIAN_MIRROR"); m != "" {
		mirror = m
	}
	start := time.Now()
	logf("images: debootstrap --variant=minbase %s + %s into %s (about 2 minutes, once)", DebianSuite, strings.Join(debianPackages, ","), root)
	args := []string{"--mount", "--propagation", "private", "debootstrap", "--variant=minbase",
		"--include=" + strings.Join(debianPackages, ","), DebianSuite, root, mirror}
	if out, err := exec.CommandContext(ctx, "unshare", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("debian base: debootstrap: %w\n%s", err, tailString(out, 3000))
	}
	for _, pattern := range basePrune {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return fmt.Errorf("debian base: prune %s: %w", pattern, err)
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("debian base: prune: %w", err)
			}
		}
	}
	if err := checkIPTables(ctx, root); err != nil {
		return err
	}

	// The base's own timestamps are those of its files' packages; a fixed
	// one makes the layer depend on the package contents only.
	tmp, err := os.CreateTemp(dir, ".base-*.tar.gz")
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	defer os.Remove(tmp.Name())
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	if err := WriteTreeTar(zw, root, time.Unix(0, 0)); err != nil {
		tmp.Close()
		return fmt.Errorf("debian base: %w", err)
	}
	if err := errors.Join(zw.Close(), tmp.Close()); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	logf("images: debian base built in %s: %s", time.Since(start).Round(time.Second), path)
	return nil
}

// checkIPTables runs both iptables backends from the tree, in a new network
// and mount namespace, so only a throwaway namespace's (empty) tables are read.
func checkIPTables(ctx context.Context, root string) error {
	for _, bin := range []string{"iptables-legacy", "iptables-nft", "ip6tables-legacy", "ip6tables-nft"} {
		out, err := exec.CommandContext(ctx, "unshare", "--net", "--mount", "chroot", root, bin, "-t", "filter", "-S").CombinedOutput()
		if err != nil {
			return fmt.Errorf("debian base: %s does not run from the base: %w\n%s", bin, err, out)
		}
		if !bytes.Contains(out, []byte("-P INPUT ACCEPT")) {
			return fmt.Errorf("debian base: %s -S printed %q, want the default policies", bin, out)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// tailString returns at most the last n bytes of b.
func tailString(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
