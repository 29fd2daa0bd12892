package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nodedns/nodedns/images"
)

// The testbed's own images, built from testbed/internal/podtool.
const (
	// PauseImage is the pod sandbox image containerd starts for every pod
	// (its CRI sandbox_image): podtool as /pause, under the name kubelet
	// v1.36 expects, so nothing is ever pulled.
	PauseImage = "registry.k8s.io/pause:3.10"
	// PodToolImage runs `podtool resolve` in client pods.
	PodToolImage = "nodedns.test/podtool:v1"
)

// podToolEpoch fixes the timestamps of the testbed's images: they are test
// fixtures, not releases.
var podToolEpoch = time.Unix(1_700_000_000, 0)

// Archive is an OCI image archive and the name it imports as.
type Archive struct {
	Ref    string
	Path   string
	Digest string // the manifest digest, "sha256:..."
}

// BuildPodImages builds PauseImage and PodToolImage into dir and returns
// their archives.
func BuildPodImages(ctx context.Context, dir string) ([]Archive, error) {
	root, err := images.FindRoot(".")
	if err != nil {
		tools, terr := toolsDir()
		if terr != nil {
			return nil, fmt.Errorf("pod images: %w", err)
		}
		if root, err = images.FindRoot(tools); err != nil {
			return nil, fmt.Errorf("pod images: %w", err)
		}
	}
	bin, err := images.GoBuildIn(ctx, root, "./testbed/internal/podtool", filepath.Join(dir, "podtool"), "-s -w")
	if err != nil {
		return nil, fmt.Errorf("pod images: %w", err)
	}
	specs := []struct {
		ref, tag, path string
		entry          []string
	}{
		{PauseImage, "3.10", "pause", []string{"/pause"}},
		{PodToolImage, "v1", "podtool", []string{"/podtool"}},
	}
	var out []Archive
	for _, s := range specs {
		layer, err := images.FilesLayer([]images.File{{Path: s.path, Data: bin, Mode: 0o755}}, podToolEpoch)
		if err != nil {
			return nil, fmt.Errorf("pod image %s: %w", s.ref, err)
		}
		img, err := images.Build(images.Spec{Layers: []v1.Layer{layer}, Entrypoint: s.entry, Created: podToolEpoch})
		if err != nil {
			return nil, fmt.Errorf("pod image %s: %w", s.ref, err)
		}
		p := filepath.Join(dir, s.path+".oci.tar")
		if err := images.WriteArchive(p, img, s.ref, s.tag); err != nil {
			return nil, fmt.Errorf("pod image %s: %w", s.ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("pod image %s: %w", s.ref, err)
		}
		out = append(out, Archive{Ref: s.ref, Path: p, Digest: d.String()})
	}
	return out, os.Remove(filepath.Join(dir, "podtool"))
}

// BuildBackendImage builds the nodedns-backend image from the tree (the
// same image `make images` writes) into dir. It stands in for the stock
// CoreDNS image too: it is CoreDNS with the plugins kubeadm's Corefile uses.
func BuildBackendImage(ctx context.Context, dir string) (Archive, error) {
	return buildTreeImage(ctx, dir, images.BackendName)
}

// BuildFrontendImage builds the nodedns-frontend image from the tree into
// dir; its Debian base comes from the pinned .deb packages (images/debian).
func BuildFrontendImage(ctx context.Context, dir string) (Archive, error) {
	return buildTreeImage(ctx, dir, images.FrontendName)
}

func buildTreeImage(ctx context.Context, dir, name string) (Archive, error) {
	root, err := images.FindRoot(".")
	if err != nil {
		return Archive{}, fmt.Errorf("%s image: %w", name, err)
	}
	tree, err := images.ReadTree(ctx, root, "")
	if err != nil {
		return Archive{}, fmt.Errorf("%s image: %w", name, err)
	}
	var b images.Built
	if name == images.FrontendName {
		b, err = images.Frontend(ctx, tree, images.DefaultRegistry, func(string, ...any) {})
	} else {
		b, err = images.Backend(ctx, tree, images.DefaultRegistry)
	}
	if err != nil {
		return Archive{}, err
	}
	p := filepath.Join(dir, b.Name+".oci.tar")
	if err := images.WriteArchive(p, b.Image, b.Ref, b.Tag); err != nil {
		return Archive{}, err
	}
	d, err := b.Image.Digest()
	if err != nil {
		return Archive{}, fmt.Errorf("%s image: %w", name, err)
	}
	return Archive{Ref: b.Ref, Path: p, Digest: d.String()}, nil
}

// DnsmasqImage runs Debian's dnsmasq (the host's /usr/sbin/dnsmasq): the
// dnsmasq of a dnsmasq+CoreDNS DaemonSet (see BuildDnsmasqImage).
const DnsmasqImage = "nodedns.test/dnsmasq:v1"

// dnsmasqBinary is the host's dnsmasq, from Debian's dnsmasq-base package.
const dnsmasqBinary = "/usr/sbin/dnsmasq"

// DnsmasqUnavailable says why BuildDnsmasqImage cannot run here, or "".
func DnsmasqUnavailable() string {
	if _, err := os.Stat(dnsmasqBinary); err != nil {
		return dnsmasqBinary + " not found: install Debian's dnsmasq-base"
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		return "ldd not found"
	}
	return ""
}

// BuildDnsmasqImage builds DnsmasqImage into dir without a container
// engine: the frontend's cached Debian base (images.DebianBase), then one
// layer holding the host's /usr/sbin/dnsmasq and every shared library ldd
// lists for it, each under its real directory (the base is merged-/usr:
// /lib is a symlink there, and a layer entry "lib/" would replace it). The
// host and the base are both Debian 12, so the libraries match what the
// base has where it has them.
func BuildDnsmasqImage(ctx context.Context, dir string) (Archive, error) {
	if r := DnsmasqUnavailable(); r != "" {
		return Archive{}, errors.New("dnsmasq image: " + r)
	}
	base, err := images.DebianBase(ctx, func(string, ...any) {})
	if err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
	}
	out, err := exec.CommandContext(ctx, "ldd", dnsmasqBinary).Output()
	if err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: ldd %s: %w", dnsmasqBinary, err)
	}
	paths := []string{dnsmasqBinary}
	for _, l := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
			}
		}
	}
	var files []images.File
	for _, p := range paths {
		realDir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
		}
		data, err := os.ReadFile(p) // through the soname's symlink
		if err != nil {
			return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
		}
		files = append(files, images.File{Path: filepath.Join(realDir, filepath.Base(p)), Data: data, Mode: 0o755})
	}
	layer, err := images.FilesLayer(files, podToolEpoch)
	if err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
	}
	img, err := images.Build(images.Spec{Layers: []v1.Layer{base, layer}, Entrypoint: []string{dnsmasqBinary}, Created: podToolEpoch})
	if err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
	}
	p := filepath.Join(dir, "dnsmasq.oci.tar")
	if err := images.WriteArchive(p, img, DnsmasqImage, "v1"); err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return Archive{}, fmt.Errorf("dnsmasq image: %w", err)
	}
	return Archive{Ref: DnsmasqImage, Path: p, Digest: d.String()}, nil
}
