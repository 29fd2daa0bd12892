package conformance

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/images/debian"
	"github.com/nodedns/nodedns/testbed"
)

// The e2e test images the DNS specs run, under the exact names the
// framework of k8s.io/kubernetes v1.36.3 gives them (test/utils/image).
// Pods name them with imagePullPolicy IfNotPresent, so the archives
// imported into the nodes' containerd are what runs; nothing is pulled.
const (
	// AgnhostImage holds /agnhost (built from the Kubernetes module), the
	// tools the specs' probe scripts and exec'd commands call (sh, seq,
	// sleep, cat, dig, getent, grep, hostname) and /coredns, which the
	// resolv.conf spec starts.
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// GlibcDNSTestingImage is the specs' glibc prober: Debian bookworm
	// with dnsutils.
	GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
)

// DNSToolsPackages are the Debian packages of both images' base layer, with
// their dependencies less images.BaseExcluded: what the probe scripts of
// dns_common.go (createProbeCommand) and the exec'd commands of dns.go run.
var DNSToolsPackages = []string{"base-files", "bash", "dash", "coreutils", "grep", "sed", "hostname", "libc-bin", "bind9-dnsutils"}

// dnsToolsLock pins DNSToolsPackages for linux/amd64 (regenerate:
// NODEDNS_CONFORMANCE_UPDATE_LOCK=1 go test ./conformance -run TestDNSToolsLock).
//
//go:embed dnstools.amd64.lock
var dnsToolsLock []byte

// DNSToolsLockPath is the lock file, relative to the repository root.
const DNSToolsLockPath = "conformance/dnstools.amd64.lock"

// imageEpoch fixes the images' timestamps: they are test fixtures.
var imageEpoch = time.Unix(1_700_000_000, 0)

// dnsToolsVersion names the cached layer with the lock's digest; bump it
// when the way the layer is made changes.
const dnsToolsVersion = "2"

// UpdateDNSToolsLock resolves DNSToolsPackages in the mirror's current
// bookworm index and returns the new lock file.
func UpdateDNSToolsLock(ctx context.Context) ([]byte, error) {
	f := debian.Fetcher{Mirror: images.DebianMirror()}
	idx, date, err := f.Index(ctx, images.DebianSuite, "amd64")
	if err != nil {
		return nil, err
	}
	pkgs, err := debian.Resolve(idx, DNSToolsPackages, images.BaseExcluded)
	if err != nil {
		return nil, fmt.Errorf("dns tools lock: %w", err)
	}
	header := []string{
		fmt.Sprintf("The e2e DNS test images' base for linux/amd64: Debian %s packages %s and their dependencies,", images.DebianSuite, strings.Join(DNSToolsPackages, ", ")),
		fmt.Sprintf("as the mirror's index of %s listed them.", date),
		"Regenerate: NODEDNS_CONFORMANCE_UPDATE_LOCK=1 go test ./conformance -run TestDNSToolsLock",
		"name version architecture size sha256 path",
	}
	return debian.FormatLock(header, pkgs), nil
}

// shLink makes /bin/sh the Debian default shell: dash's maintainer script
// makes that link on a real system, and images run no maintainer scripts.
var shLink = debian.Entry{Header: tar.Header{Name: "usr/bin/sh", Typeflag: tar.TypeSymlink, Linkname: "dash", Mode: 0o777}}

// dnsToolsLayer returns the Debian layer of both images, built from the
// locked .debs into the image cache (images.CacheDir) when missing.
func dnsToolsLayer(ctx context.Context) (v1.Layer, error) {
	dir, err := images.CacheDir()
	if err != nil {
		return nil, err
	}
	pkgs, err := debian.ParseLock(bytes.NewReader(dnsToolsLock))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DNSToolsLockPath, err)
	}
	sum := sha256Hex(dnsToolsLock)
	path := filepath.Join(dir, fmt.Sprintf("e2e-dnstools-%s-amd64-v%s-%.12s.tar.gz", images.DebianSuite, dnsToolsVersion, sum))
	if _, err := os.Stat(path); err != nil {
		f := debian.Fetcher{Mirror: images.DebianMirror(), CacheDir: filepath.Join(dir, "debs")}
		root := debian.NewRootFS()
		for _, p := range pkgs {
			b, err := f.Deb(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("dns tools layer: %w", err)
			}
			if err := root.AddDeb(b); err != nil {
				return nil, fmt.Errorf("dns tools layer: %s: %w", p.Filename, err)
			}
		}
		for _, e := range []debian.Entry{shLink, debian.Dir("tmp", 0o1777), debian.Dir("root", 0o700),
			debian.File("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"), 0o644),
			debian.File("etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644),
			// Debian's default, which a postinst writes on a real system:
			// without the file glibc asks DNS before /etc/hosts and stops
			// at its NXDOMAIN, and `getent hosts` of the pod's own name
			// (the /etc/hosts spec) fails.
			debian.File("etc/nsswitch.conf", []byte("passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"), 0o644)} {
			if err := root.Add(e); err != nil {
				return nil, fmt.Errorf("dns tools layer: %w", err)
			}
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if err := root.WriteTar(zw, time.Unix(0, 0)); err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		// A temporary file renamed into place: a concurrent build or
		// reader never sees half a layer.
		tmp, err := os.CreateTemp(dir, ".e2e-dnstools-*.tar.gz")
		if err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.Write(buf.Bytes()); err != nil {
			tmp.Close()
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		if err := tmp.Close(); err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		if err := os.Chmod(tmp.Name(), 0o644); err != nil { // CreateTemp makes it 0600
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return nil, fmt.Errorf("dns tools layer: %w", err)
		}
	}
	l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("dns tools layer %s: %w", path, err)
	}
	return l, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// BuildTestImages writes AgnhostImage and GlibcDNSTestingImage as OCI
// archives into dir. agnhost is the binary of k8s.io/kubernetes
// test/images/agnhost (tools/k8s/build.sh agnhost); /coredns in both is
// the nodedns-backend binary, a CoreDNS build, at corednsBin.
func BuildTestImages(ctx context.Context, dir, agnhostBin, corednsBin string) ([]testbed.Archive, error) {
	base, err := dnsToolsLayer(ctx)
	if err != nil {
		return nil, err
	}
	agnhost, err := os.ReadFile(agnhostBin)
	if err != nil {
		return nil, fmt.Errorf("agnhost image: %w", err)
	}
	coredns, err := os.ReadFile(corednsBin)
	if err != nil {
		return nil, fmt.Errorf("agnhost image: %w", err)
	}
	specs := []struct {
		ref   string
		files []images.File
		entry []string
		cmd   []string
	}{
		{AgnhostImage, []images.File{{Path: "agnhost", Data: agnhost, Mode: 0o755}, {Path: "coredns", Data: coredns, Mode: 0o755}}, []string{"/agnhost"}, []string{"pause"}},
		{GlibcDNSTestingImage, []images.File{{Path: "coredns", Data: coredns, Mode: 0o755}}, nil, []string{"/bin/sh"}},
	}
	var out []testbed.Archive
	for _, s := range specs {
		layer, err := images.FilesLayer(s.files, imageEpoch)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.ref, err)
		}
		img, err := images.Build(images.Spec{Layers: []v1.Layer{base, layer}, Entrypoint: s.entry, Cmd: s.cmd, Created: imageEpoch,
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.ref, err)
		}
		name := s.ref[strings.LastIndexByte(s.ref, '/')+1 : strings.LastIndexByte(s.ref, ':')]
		tag := s.ref[strings.LastIndexByte(s.ref, ':')+1:]
		p := filepath.Join(dir, name+".oci.tar")
		if err := images.WriteArchive(p, img, s.ref, tag); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.ref, err)
		}
		out = append(out, testbed.Archive{Ref: s.ref, Path: p, Digest: d.String()})
	}
	return out, nil
}
