package images

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodedns/nodedns/images/debian"
)

// The frontend's base: Debian bookworm's iptables package (iptables-legacy,
// iptables-nft, ip6tables-*, the xtables modules) with the libraries it
// needs, base-files (/etc/os-release, so scanners know the distribution)
// and nothing that only a package manager or a person needs, unpacked from
// the .debs a lock file pins (see images/debian). No root, no chroot.
const (
	// DebianSuite is the Debian release of the frontend's base.
	DebianSuite = "bookworm"
	// baseVersion names the cache entry together with the lock's digest;
	// bump it when the way the layer is made changes, so that an old
	// cached layer is not reused.
	baseVersion = "3"
	// DefaultDebianMirror is where the .debs come from; the
	// NODEDNS_DEBIAN_MIRROR environment variable overrides it.
	DefaultDebianMirror = "http://deb.debian.org/debian"
)

// BasePackages are the packages the base is made of, with their Depends
// and Pre-Depends, less BaseExcluded.
var BasePackages = []string{"base-files", "iptables"}

// BaseExcluded are dependencies left out: they serve maintainer scripts,
// which an image does not run (base-files' postinst needs awk), or a
// package manager.
var BaseExcluded = map[string]bool{
	"awk": true, "mawk": true, "debconf": true, "debconf-2.0": true,
	"perl-base": true, "dpkg": true, "install-info": true, "init-system-helpers": true,
}

// Architectures are the platforms the images are built for, all linux.
var Architectures = []string{"amd64", "arm64"}

// The committed lock files, one per architecture: LockPath names them in
// the tree, for the command that regenerates them.
var (
	//go:embed frontend-base.amd64.lock
	lockAMD64 []byte
	//go:embed frontend-base.arm64.lock
	lockARM64 []byte
)

// LockPath is the lock file of arch, relative to the repository root.
func LockPath(arch string) string { return "images/frontend-base." + arch + ".lock" }

func baseLock(arch string) ([]byte, error) {
	switch arch {
	case "amd64":
		return lockAMD64, nil
	case "arm64":
		return lockARM64, nil
	}
	return nil, fmt.Errorf("debian base: no lock for architecture %q (have %s)", arch, strings.Join(Architectures, ", "))
}

// DebianMirror is $NODEDNS_DEBIAN_MIRROR, else DefaultDebianMirror.
func DebianMirror() string {
	if m := os.Getenv("NODEDNS_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return DefaultDebianMirror
}

// CacheDir is where downloaded .debs and built bases are kept:
// $NODEDNS_IMAGES_CACHE, else <user cache dir>/nodedns/images.
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

// DebianBase returns the linux/amd64 base layer (DebianBaseFor).
func DebianBase(ctx context.Context, logf func(string, ...any)) (v1.Layer, error) {
	return DebianBaseFor(ctx, "amd64", logf)
}

// DebianBaseFor returns the frontend's base layer for arch, building it
// from the locked .debs and caching it first when missing. The cache entry
// is named by the lock's digest, so a new lock makes a new layer.
func DebianBaseFor(ctx context.Context, arch string, logf func(string, ...any)) (v1.Layer, error) {
	lock, err := baseLock(arch)
	if err != nil {
		return nil, err
	}
	dir, err := CacheDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("frontend-base-%s-%s-v%s-%.12x.tar.gz", DebianSuite, arch, baseVersion, sha256Bytes(lock)))
	if !fileExists(path) {
		if err := buildBase(ctx, arch, lock, dir, path, logf); err != nil {
			return nil, err
		}
	}
	l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("debian base %s: %w", path, err)
	}
	return l, nil
}

// baseFiles are added to the packages' files: the users the images run as
// (distroless's root, nonroot and nobody; no package's postinst makes
// them here) and the directories a root filesystem has.
var baseFiles = []debian.Entry{
	debian.File("etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644),
	debian.File("etc/group", []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"), 0o644),
	debian.Dir("root", 0o700),
	debian.Dir("tmp", 0o1777),
}

// buildBase fetches the locked .debs (from the cache when there), unpacks
// them into one tree and writes it as a gzip layer tar at path.
func buildBase(ctx context.Context, arch string, lock []byte, dir, path string, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	// One build at a time: parallel test packages may all find it missing.
	lf, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("debian base: lock: %w", err)
	}
	if fileExists(path) {
		return nil
	}
	pkgs, err := debian.ParseLock(bytes.NewReader(lock))
	if err != nil {
		return fmt.Errorf("debian base %s: %s: %w", arch, LockPath(arch), err)
	}
	start := time.Now()
	f := debian.Fetcher{Mirror: DebianMirror(), CacheDir: filepath.Join(dir, "debs")}
	root := debian.NewRootFS()
	for _, p := range pkgs {
		if p.Architecture != arch && p.Architecture != "all" {
			return fmt.Errorf("debian base %s: %s is locked for %s", arch, p.Name, p.Architecture)
		}
		b, err := f.Deb(ctx, p)
		if err != nil {
			return fmt.Errorf("debian base %s: %w", arch, err)
		}
		if err := root.AddDeb(b); err != nil {
			return fmt.Errorf("debian base %s: %s: %w", arch, p.Filename, err)
		}
	}
	for _, e := range baseFiles {
		if err := root.Add(e); err != nil {
			return fmt.Errorf("debian base %s: %w", arch, err)
		}
	}
	tmp, err := os.CreateTemp(dir, ".base-*.tar.gz")
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	defer os.Remove(tmp.Name())
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	// The packages' own file times carry no meaning in an image; one fixed
	// time makes the layer depend on the contents only.
	if err := root.WriteTar(zw, time.Unix(0, 0)); err != nil {
		tmp.Close()
		return fmt.Errorf("debian base %s: %w", arch, err)
	}
	if err := errors.Join(zw.Close(), tmp.Close()); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("debian base: %w", err)
	}
	logf("images: debian base %s built from %d packages in %s: %s", arch, len(pkgs), time.Since(start).Round(time.Millisecond), path)
	return nil
}

// UpdateLock resolves BasePackages in the mirror's current index for arch
// and returns the new lock file's content.
func UpdateLock(ctx context.Context, arch string) ([]byte, error) {
	f := debian.Fetcher{Mirror: DebianMirror()}
	idx, date, err := f.Index(ctx, DebianSuite, arch)
	if err != nil {
		return nil, err
	}
	pkgs, err := debian.Resolve(idx, BasePackages, BaseExcluded)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", DebianSuite, arch, err)
	}
	header := []string{
		fmt.Sprintf("The frontend's base for linux/%s: Debian %s packages %s and their dependencies,", arch, DebianSuite, strings.Join(BasePackages, ", ")),
		fmt.Sprintf("as the mirror's index of %s listed them.", date),
		"Regenerate: go run ./images/cmd/nodedns-images -update-lock",
		"name version architecture size sha256 path",
	}
	return debian.FormatLock(header, pkgs), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sha256Bytes(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
